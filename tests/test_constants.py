"""One definition of the duration laws (model/laws.py) and of the names the codes stand
for (model/constants.py): the config follows them, and no other module of the package
writes them out again."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from gmm_volunteer.model import constants, laws
from gmm_volunteer.run import config

PACKAGE = Path(__file__).resolve().parents[1] / "gmm_volunteer"


def test_config_laws_are_the_laws_of_model_laws():
    classes = get_args(get_args(config.Dist)[0])
    assert tuple(c.model_fields["dist"].annotation.__args__[0] for c in classes) == laws.NAMES
    for cls in classes:
        name = cls.model_fields["dist"].annotation.__args__[0]
        keys = tuple(f.alias or n for n, f in cls.model_fields.items() if n != "dist")
        assert keys == laws.PARAMETERS[name], name


def test_config_resource_sections_follow_the_resource_names():
    for section in (config.BaseProfile, config.AllocationMeans, config.AllocationSds):
        assert tuple(section.model_fields) == constants.RESOURCES, section.__name__
    assert config.BaseProfile(cpu=123.0).as_array()[constants.CPU] == 123.0


def test_codes_stand_for_their_names():
    assert constants.RESOURCES[constants.STORAGE] == "storage"
    assert constants.EVENTS[constants.EV_CANCEL] == "cancel"
    assert constants.OUTCOMES[constants.OUT_DROPPED] == "dropped"
    assert constants.MONITOR_OPS[constants.OP_LABEL_UPDATE] == "label_update"
    assert constants.RUN_PHASES[constants.UPLOAD] == "upload"
    assert constants.PHASES == ("download", "execution", "upload")
    assert constants.READINESS[constants.PAUSED] == "paused"
    assert laws.NAMES[laws.NEVER] == "never"


@pytest.mark.parametrize("law, mean, median", [
    (config.Weibull(dist="weibull", scale=2.0, shape=1.0), 2.0, 2.0 * math.log(2.0)),
    (config.Exponential(dist="exponential", mean=3.0), 3.0, 3.0 * math.log(2.0)),
    (config.Pareto(dist="pareto", scale=30.0, shape=1.5), 90.0, 30.0 * 2.0 ** (1 / 1.5)),
    (config.LogNormal(dist="lognormal", mu=1.0, sigma=0.5), math.exp(1.125), math.e),
])
def test_config_law_methods_are_the_closed_forms(law, mean, median):
    # the values of the formulas written out, to 1e-12 relative (rounding of a few ops)
    assert law.mean() == pytest.approx(mean, rel=1e-12)
    assert law.median() == pytest.approx(median, rel=1e-12)
    assert float(law.survival(law.median())) == pytest.approx(0.5, rel=1e-12)
    assert np.array_equal(law.law(), laws.law_array(law.dist, *law.law()[1:]))


# Texts that are a second definition when found outside their home module.
SECOND_DEFINITIONS = {
    r'"band_in",\s*"band_out",\s*"cpu",\s*"memory"': "model/constants.py",
    r'"start",\s*"complete",\s*"abort"': "model/constants.py",
    r'"completed",\s*"abandoned",\s*"dropped"': "model/constants.py",
    r'"metric_read",\s*"latency_probe"': "model/constants.py",
    r'"download",\s*"execution",\s*"upload"': "model/constants.py",
    r'"empty",\s*"loading",\s*"paused"': "model/constants.py",
    # codes numbered by the order of a second list, apart from the names they stand for
    r"\b(EV_\w+|OUT_\w+|OP_\w+|DIST_\w+|IDLE|EMPTY)(,\s*\w+)*\s*=\s*range\(": None,
    r'"weibull",\s*"lognormal",\s*"pareto"': "model/laws.py",
    r"def continuous_duration|def discrete_duration|MAX_DURATION\s*=": "model/laws.py",
}


@pytest.mark.parametrize("pattern, home", SECOND_DEFINITIONS.items())
def test_no_second_definition(pattern, home):
    found = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
             if re.search(pattern, p.read_text(encoding="utf-8"))]
    assert found == ([home] if home else [])
