"""pytest configuration of scaledmm's Python test suite.

Run from python/:  ../.venv/bin/python -m pytest -q tests

The suite tests the installed package (pip install ./python), which holds
the compiled extension and the bundled libscaledmm. `python -m pytest` puts
the working folder on sys.path, where python/scaledmm holds only the
sources, so that folder is taken off sys.path here, before any test
imports scaledmm.

Random problems: the session seed is SCALEDMM_TEST_SEED (decimal or 0x-hex;
any other text is a usage error) or else drawn at random. It is printed in
the header and in every failure report; each test draws from a generator
seeded by (session seed, test id), so
    SCALEDMM_TEST_SEED=<seed> ../.venv/bin/python -m pytest '<test id>'
replays one failing test exactly.
"""
import os
import secrets
import sys
from pathlib import Path

import pytest

_SOURCES = Path(__file__).resolve().parent.parent   # python/
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != _SOURCES]
_loaded = sys.modules.get("scaledmm")
if _loaded is not None and Path(_loaded.__file__).resolve().parent.parent == _SOURCES:
    raise ImportError("scaledmm was imported from the source folder %s, not from the installed "
                      "package; install it with pip install ./python" % _SOURCES)

import helpers  # noqa: E402  (tests/ is on sys.path for its conftest)


def pytest_configure(config):
    try:
        seed = helpers.parse_seed(os.environ.get(helpers.SEED_ENV))
    except ValueError as e:
        raise pytest.UsageError(str(e))
    if seed is None:
        # xdist workers inherit the controller's choice through the environment
        seed = int(os.environ.get("_SCALEDMM_SESSION_SEED") or secrets.randbits(64))
    os.environ["_SCALEDMM_SESSION_SEED"] = str(seed)
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU and scaledmm's cuda backend")
    # raised inside torch's own compile stack, not by scaledmm
    config.addinivalue_line("filterwarnings",
                            "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


def pytest_report_header(config):
    import scaledmm

    info = scaledmm.info()
    avail = [b for b, v in info["backends"].items() if v["available"]]
    return ["scaledmm %s from %s; backends available: %s (auto: %s)" % (
                scaledmm.__version__, Path(scaledmm.__file__).parent, ", ".join(avail), info["auto"]),
            "scaledmm random seed: %s=0x%x" % (helpers.SEED_ENV, helpers.session_seed())]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("scaledmm seed", "replay: %s=0x%x %s -m pytest '%s'" % (
            helpers.SEED_ENV, helpers.session_seed(), Path(sys.executable).name, item.nodeid)))


@pytest.fixture
def rng(request):
    """numpy Generator of this test, from (session seed, test id)."""
    return helpers.test_rng(request.node.nodeid)


@pytest.fixture
def seed_note():
    """' (seed SCALEDMM_TEST_SEED=0x...)' for assertion messages."""
    return " (seed %s=0x%x)" % (helpers.SEED_ENV, helpers.session_seed())
