"""Builds the scaledmm Python package from a clone of the scaledmm repository.

The package bundles the C library it was built from: `pip install ./python`
runs the repository's own ../setup.sh (which installs the build dependencies
from Debian, generates configure, configures and builds libscaledmm) unless
that build folder already holds a built library, then copies libscaledmm.so
and any GPU plugin the build made into scaledmm/_lib/ and compiles the
extension module scaledmm._core against ../include/scaledmm.h, so that no
declaration is copied by hand.

Environment:
  SCALEDMM_BUILD_DIR       the C build folder, relative to the repository
                           (default: build); e.g. build-cuda
  SCALEDMM_CONFIGURE_ARGS  configure arguments for a folder not configured
                           yet, e.g. "--with-cuda" (a GPU plugin is then
                           built and bundled)
  SCALEDMM_LIB_DIR         bundle an already built library instead: the
                           folder holding libscaledmm.so.0 (an installed
                           $(libdir), or a build's lib/.libs), its GPU
                           plugins in that folder's scaledmm/ or beside it;
                           nothing is configured or built then
"""
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PLUGINS = ("libscaledmm-cuda.so", "libscaledmm-rocm.so")


def c_build_dir() -> Path:
    return REPO / os.environ.get("SCALEDMM_BUILD_DIR", "build")


def built_library(build: Path) -> Path:
    """The real file of the shared libscaledmm in a build folder (the soname link followed)."""
    return (build / "lib" / ".libs" / "libscaledmm.so.0").resolve()


class BuildWithLibrary(build_ext):
    """Builds (or reuses) the C library, bundles it, then builds scaledmm._core."""

    def run(self):
        if not (REPO / "setup.sh").is_file() or not (REPO / "include" / "scaledmm.h").is_file():
            raise SystemExit("scaledmm: build the Python package from a clone of the scaledmm "
                             "repository (pip install ./python); %s is not one" % REPO)
        prebuilt = os.environ.get("SCALEDMM_LIB_DIR")
        if prebuilt:
            lib = (Path(prebuilt) / "libscaledmm.so.0").resolve()
            plugin_dirs = [Path(prebuilt) / "scaledmm", Path(prebuilt)]
        else:
            lib = self.build_library()
            plugin_dirs = [c_build_dir() / "lib"]
        if not lib.is_file():
            raise SystemExit("scaledmm: %s was not built" % lib)

        # Bundle: scaledmm/_lib/libscaledmm.so.0 and scaledmm/_lib/scaledmm/<plugin>,
        # the layout the library's plugin loader looks for beside itself.
        pkg = Path(self.build_lib) / "scaledmm"
        libdir = pkg / "_lib"
        if libdir.exists():
            shutil.rmtree(libdir)
        (libdir / "scaledmm").mkdir(parents=True)
        shutil.copy2(lib, libdir / "libscaledmm.so.0")
        os.symlink("libscaledmm.so.0", libdir / "libscaledmm.so")
        for p in PLUGINS:
            found = [d / p for d in plugin_dirs if (d / p).is_file()]
            if found:
                shutil.copy2(found[0], libdir / "scaledmm" / p)
        (pkg / "include").mkdir(exist_ok=True)
        shutil.copy2(REPO / "include" / "scaledmm.h", pkg / "include" / "scaledmm.h")

        for ext in self.extensions:
            ext.include_dirs.append(str(REPO / "include"))
            ext.library_dirs.append(str(libdir))
        super().run()

    def build_library(self) -> Path:
        """Configures (through ../setup.sh) and builds the C library; its path."""
        build = c_build_dir()
        env = dict(os.environ, BUILD_DIR=str(build))
        if not (build / "Makefile").is_file():
            args = shlex.split(os.environ.get("SCALEDMM_CONFIGURE_ARGS", ""))
            self.announce("scaledmm: running %s/setup.sh %s" % (REPO, " ".join(args)), level=2)
            subprocess.check_call([str(REPO / "setup.sh")] + args, env=env)
        else:
            # Already configured: bring the library up to date (GPU plugins included).
            subprocess.check_call(["make", "-C", str(build / "lib"), "-j%d" % (os.cpu_count() or 1)],
                                  stdout=subprocess.DEVNULL)
        return built_library(build)


setup(
    ext_modules=[
        Extension(
            "scaledmm._core",
            sources=["scaledmm/_core.c"],
            libraries=["scaledmm"],
            runtime_library_dirs=["$ORIGIN/_lib"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
        )
    ],
    cmdclass={"build_ext": BuildWithLibrary},
)
