// The PTO ISA for CPUs: everything a generated kernel includes. Each instruction is a function
// template named after its opcode (operand 0 = destination), see docs/isa.md (the ISA reference).
#pragma once
#include "pto/abi.h"
#include "pto/cpu/chain_rows.hpp"
#include "pto/cpu/elementwise.hpp"
#include "pto/cpu/gather.hpp"
#include "pto/cpu/layout.hpp"
#include "pto/cpu/matmul.hpp"
#include "pto/cpu/memory.hpp"
#include "pto/cpu/parallel.hpp"
#include "pto/cpu/reduce.hpp"
#include "pto/cpu/rows.hpp"
#include "pto/cpu/rows_grad.hpp"
#include "pto/cpu/sync.hpp"
#include "pto/cpu/trig.hpp"
#include "pto/cpu/types.hpp"
#include "pto/elem.hpp"
#include "pto/math.hpp"
