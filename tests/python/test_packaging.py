"""Packaging: the development install (import pypto from any directory), `pip install .` of a clean
copy of the source into a fresh venv, `cmake --install` with a find_package(pypto) consumer
(examples/cpp_api), and PYPTO_LOG_LEVEL=DEBUG's compile log."""
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pypto
from pypto_testutil import requires_compiler

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
KERNEL = ("import numpy as np, pypto\n"
          "f = pypto.jit(lambda x: x * 2.0 + 1.0)\n"
          "x = np.random.default_rng(0).random((8, 8), dtype=np.float32)\n"
          "assert np.allclose(f(x), x * 2 + 1)\n"
          "print(pypto.__file__)\n")


def kernel_script(folder):
    """KERNEL as a file (@pypto.jit reads a kernel's source from its file)."""
    path = pathlib.Path(folder) / "kernel_script.py"
    path.write_text(KERNEL)
    return str(path)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYPTO_LOG_LEVEL", "PYTO_LOG_LEVEL")}
    env.update(extra)
    return env


def tool(name):
    here = pathlib.Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


@requires_compiler
def test_dev_install_imports_pypto_from_any_directory(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # The new venv borrows this one's packages (numpy) through a .pth of its own.
    pathlib.Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    before = subprocess.run([str(py), "-c", "import pypto"], cwd=elsewhere, env=clean_env(),
                            capture_output=True, text=True)
    assert before.returncode != 0 and "No module named 'pypto'" in before.stderr
    subprocess.run([str(py), str(ROOT / "scripts" / "dev_install.py")], check=True, env=clean_env(), timeout=60)
    after = subprocess.run([str(py), kernel_script(elsewhere)], cwd=elsewhere, capture_output=True, text=True, timeout=300,
                           env=clean_env(PYPTO_CACHE_DIR=str(tmp_path / "cache")))
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == str(ROOT / "python" / "pypto" / "__init__.py")


def source_copy(dest):
    """The files a fresh clone has (tracked, and new files git does not ignore), without build
    outputs: no _C module, build folder or venv of this tree can leak into what pip builds."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@requires_compiler
def test_pip_install_into_a_fresh_venv_runs_a_kernel(tmp_path):
    """`pip install .` (scikit-build-core, CMake) into a new venv: the wheel carries _C and the
    headers generated kernels include, and a kernel compiles and runs from another directory.
    The build tools come from this venv (no network); ccache is used when the machine has it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        raise AssertionError("this test copies the source with git ls-files: run it in a git checkout")
    src = source_copy(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # numpy and the build backend (scikit-build-core, nanobind, cmake, ninja) come from this venv.
    pathlib.Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = clean_env(PATH=str(pathlib.Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if shutil.which("ccache"):
        env["CMAKE_CXX_COMPILER_LAUNCHER"] = "ccache"
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index", "-q", "."],
                       cwd=src, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    installed = pathlib.Path(site) / "pypto"
    assert list(installed.glob("_C*.so")) and (installed / "include" / "pto" / "pto.hpp").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = subprocess.run([str(py), kernel_script(elsewhere)], cwd=elsewhere, capture_output=True, text=True,
                         timeout=300, env=clean_env(PYPTO_CACHE_DIR=str(tmp_path / "cache")))
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == str(installed / "__init__.py")


@requires_compiler
def test_cmake_install_and_a_find_package_consumer(tmp_path):
    prefix, build = tmp_path / "prefix", tmp_path / "example"
    cmake, ninja = tool("cmake"), tool("ninja")
    subprocess.run([cmake, "--install", str(BUILD), "--prefix", str(prefix)], check=True, capture_output=True,
                   timeout=300)
    for f in ("include/pto/abi.h", "include/pypto/runtime/kernel.h", "include/pypto/ir/ir.h", "bin/ptoc",
              "lib/cmake/pypto/pyptoConfig.cmake", "lib/libpypto_runtime.a"):
        assert (prefix / f).exists(), f
    subprocess.run([cmake, "-S", str(ROOT / "examples" / "cpp_api"), "-B", str(build), "-G", "Ninja",
                    f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DCMAKE_PREFIX_PATH={prefix}"],
                   check=True, capture_output=True, timeout=300)
    r = subprocess.run([cmake, "--build", str(build)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:]
    env = clean_env(PYPTO_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYPTO_INCLUDE_DIR", None)  # the installed headers are found through the install
    run = subprocess.run([str(build / "cpp_api_example")], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.startswith("ok "), run.stdout + run.stderr


@requires_compiler
def test_debug_log_shows_the_compile_command_time_and_cache(tmp_path):
    env = clean_env(PYPTO_LOG_LEVEL="DEBUG", PYPTO_CACHE_DIR=str(tmp_path / "cache"),
                    PYTHONPATH=str(ROOT / "python"))
    script = kernel_script(tmp_path)
    runs = [subprocess.run([sys.executable, script], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    first, second = runs[0].stderr, runs[1].stderr
    assert "cache miss in " + str(tmp_path / "cache") in first
    assert ": compiling: " in first and " -O3 " in first and "compiler exit status 0 after" in first
    assert "disk cache hit (" + str(tmp_path / "cache") in second and ": compiling: " not in second
    assert pypto.__file__  # the in-process package is the same tree
