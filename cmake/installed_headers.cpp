// Compiled into every program that links pypto::pypto from an install (pyptoConfig.cmake adds it):
// tells the CPU backend where the installed kernel headers are (it compiles kernels against them
// at run time). PYPTO_INCLUDE_DIR in the environment still takes precedence.
extern "C" const char* pypto_installed_headers_dir() { return PYPTO_INSTALLED_HEADERS; }
