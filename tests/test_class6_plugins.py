"""Class 6 of issue "Hardening II": plugin policies fail cleanly.

Every failure of a ``module:Class`` policy is exit 2 naming the plugin, the hook and the
exception (the traceback with -v); SystemExit at import is caught; names that are not
policies are refused before anything is called; plugins can be refused altogether.
"""

from __future__ import annotations

import textwrap

import pytest
import yaml

from gmm_volunteer.cli.commands import main

HEAD = """
from numba import njit
from gmm_volunteer.policies.base import Scheduler
from gmm_volunteer.policies.autoscalers.reactive import Reactive
from gmm_volunteer.policies.uniform import uniform_place
"""

PLUGINS = {
    "import_raises": "raise RuntimeError('broken at import')\n",
    "import_exits": "import sys\nsys.exit(0)\n",
    "defines_act": "class P(Scheduler):\n    place = uniform_place\n    def act(self, S, P, t):\n        pass\n",
    "hook_not_jitted": "class P(Scheduler):\n    def place(S, P, t, args):\n        pass\n",
    "no_hooks": "class P(Scheduler):\n    pass\n",
    "init_raises": "class P(Scheduler):\n    place = uniform_place\n"
                   "    def __init__(self, **o):\n        raise KeyError('from init')\n",
    "hook_raises": "@njit(cache=False)\ndef bad_place(S, P, t, args):\n    if t == 3:\n"
                   "        raise ValueError('placing failed')\n\n"
                   "class P(Scheduler):\n    place = bad_place\n",
    "desired_raises": "class P(Reactive):\n    def desired(self, obs, units, t):\n        raise ZeroDivisionError('oops')\n",
    "desired_nan": "class P(Reactive):\n    def desired(self, obs, units, t):\n        return float('nan')\n",
    "desired_none": "class P(Reactive):\n    def desired(self, obs, units, t):\n        return None\n",
}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    d = tmp_path / "plugins"
    d.mkdir()
    for name, body in PLUGINS.items():
        (d / f"gmmv_plugin_{name}.py").write_text(HEAD + textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(d))
    monkeypatch.delenv("GMMV_NO_PLUGINS", raising=False)
    return d


def _config(tmp_path, synthetic_model, **extra):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump({"steps": 40, "users": {"count": 10}, "server": {"capacity": 10}, "model": str(synthetic_model),
                                    "requests": {"think_time": {"dist": "exponential", "mean": 4.0}},
                                    **extra}))
    return path


def _run(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.err


@pytest.mark.parametrize("plugin, kind, hook, exception", [
    ("import_raises", "scheduler", "importing", "RuntimeError: broken at import"),
    ("import_exits", "scheduler", "importing", "SystemExit: 0"),
    ("defines_act", "scheduler", "importing", "overrides Scheduler.act"),
    ("hook_not_jitted", "scheduler", "importing", "must be an @njit function"),
    ("no_hooks", "scheduler", "hook(s) place", "not @njit"),
    ("init_raises", "scheduler", "__init__", "KeyError"),
    ("hook_raises", "scheduler", "a hook", "ValueError: placing failed"),
    ("desired_raises", "autoscaler", "desired", "ZeroDivisionError: oops"),
    ("desired_nan", "autoscaler", "desired", "returned nan"),
    ("desired_none", "autoscaler", "desired", "returned None"),
])
def test_class6_plugin_failures_are_exit_2_naming_plugin_hook_exception(
        tmp_path, capsys, synthetic_model, plugin_dir, plugin, kind, hook, exception):
    name = f"gmmv_plugin_{plugin}:P"
    cfg = _config(tmp_path, synthetic_model, **{kind: name})
    out = tmp_path / "out.zarr"
    code, err = _run(["run", str(cfg), "-o", str(out), "-q"], capsys)
    assert code == 2, err
    assert name in err and hook in err and exception in err, err
    assert "Traceback" not in err
    assert not out.exists()


def test_class6_verbose_shows_the_plugins_traceback(tmp_path, capsys, synthetic_model, plugin_dir):
    cfg = _config(tmp_path, synthetic_model, autoscaler="gmmv_plugin_desired_raises:P")
    code, err = _run(["run", str(cfg), "-o", str(tmp_path / "o.zarr"), "-v"], capsys)
    assert code == 2 and "Traceback" in err and "raise ZeroDivisionError" in err, err


@pytest.mark.parametrize("name, options", [
    ("builtins:object", {}), ("os:getcwd", {}), ("os:system", {"command": "touch {marker}"}),
])
@pytest.mark.parametrize("command", ["run", "sweep --dry-run"])
def test_class6_names_that_are_not_policies_are_refused_before_use(
        tmp_path, capsys, synthetic_model, name, options, command):
    marker = tmp_path / "ran"
    opts = {k: v.format(marker=marker) for k, v in options.items()}
    cfg = _config(tmp_path, synthetic_model, scheduler=name, scheduler_options=opts)
    if command == "run":
        code, err = _run(["run", str(cfg), "-o", str(tmp_path / "o.zarr")], capsys)
    else:
        grid = tmp_path / "grid.yaml"
        grid.write_text(yaml.safe_dump({"base": str(cfg), "grid": {"users.count": [10]},
                                        "output": str(tmp_path / "sweep")}))
        code, err = _run(["sweep", str(grid), "--dry-run"], capsys)
    assert code == 2 and "is not a scheduler" in err, err
    assert not marker.exists()


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_class6_plugins_can_be_refused(tmp_path, capsys, synthetic_model, monkeypatch, how):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "examples" / "least_loaded"))
    cfg = _config(tmp_path, synthetic_model, scheduler="least_loaded:LeastLoaded")
    argv = ["run", str(cfg), "-o", str(tmp_path / "o.zarr")]
    if how == "flag":
        monkeypatch.setenv("GMMV_NO_PLUGINS", "0")  # not refused; the flag sets it (restored after)
        argv = ["--no-plugins", *argv]
    else:
        monkeypatch.setenv("GMMV_NO_PLUGINS", "1")
    code, err = _run(argv, capsys)
    assert code == 2 and "plugins are refused" in err, err
    assert not (tmp_path / "o.zarr").exists()
