#!/usr/bin/env python3
"""Development install: makes `import pypto` work from any directory for the Python running this
script, by writing pypto-dev.pth (one line: the source tree's python/ folder) into its
site-packages. The package is then the source tree itself (edits show without a reinstall); the
_C module is the one `make build` writes into python/pypto. Undo: delete the .pth file.

    python scripts/dev_install.py [PYTHON_DIR]      (default: python/ beside this script)"""
import os
import sys
import sysconfig

here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "python"))
if not os.path.isfile(os.path.join(src, "pypto", "__init__.py")):
    sys.exit(f"dev_install: {src} holds no pypto package")
site = sysconfig.get_paths()["purelib"]
path = os.path.join(site, "pypto-dev.pth")
with open(path + ".tmp", "w") as f:
    f.write(src + "\n")
os.replace(path + ".tmp", path)
print(f"dev_install: {path} -> {src}")
