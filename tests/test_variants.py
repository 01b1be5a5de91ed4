"""Model variants and the accuracy served (issue 12 item 1; docs/model.md D24)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from gmm_volunteer.io.bundlefiles import load_bundle

from gmm_volunteer.model.bundle import BundleError, validate_bundle
from gmm_volunteer.run.config import config_from_dict
from gmm_volunteer.run.engine import Simulation
from gmm_volunteer.model.params import build_params

ROOT = Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "gmm_volunteer/bundles/default")
ACC = {"mobilenet_v2": 0.718, "resnet50": 0.761}


def _cfg(scheduler="uniform", variants=False, options=None, users=60, steps=800, seed=4,
         subtask_data="model"):
    return config_from_dict({"seed": seed, "steps": steps, "users": {"count": users},
                             "server": {"capacity": 10}, "scheduler": scheduler,
                             "scheduler_options": options or {}, "model": MODEL,
                             "execution": {"variants": variants, "subtask_data": subtask_data}})


def _raw():
    return yaml.safe_load((ROOT / "gmm_volunteer/bundles/default/bundle.yaml").read_text())


def test_shipped_catalog_names_the_classifier_variants():
    b = load_bundle(MODEL)
    got = {s.name: (s.function, s.accuracy) for s in b.subtask_types if s.function}
    assert got == {n: ("image_classification", a) for n, a in ACC.items()}


@pytest.mark.parametrize("edit, key", [
    (lambda st: st[4].pop("accuracy"), "subtask_types.4.accuracy"),
    (lambda st: st[3].update(accuracy=1.5), "subtask_types.3.accuracy"),
    (lambda st: st[3].update(accuracy=0.0), "subtask_types.3.accuracy"),
    (lambda st: st[3].update(function=""), "subtask_types.3.function"),
])
def test_bad_variant_keys_name_the_key(edit, key):
    data = _raw()
    edit(data["subtask_types"])
    with pytest.raises(BundleError, match=key.replace(".", r"\.")):
        validate_bundle(data, "b.yaml")


def test_bundle_without_variant_keys_still_reads():
    data = _raw()
    for st in data["subtask_types"]:
        st.pop("function", None)
        st.pop("accuracy", None)
    validate_bundle(data, "b.yaml")


def test_variant_subtasks_appended_only_when_enabled_per_slot():
    b = load_bundle(MODEL)
    off = build_params(_cfg(variants=False, subtask_data="slot"), b)
    on = build_params(_cfg(variants=True, subtask_data="slot"), b)
    assert off.n_sub == off.n_req == 30 and np.all(off.var_n == 1)
    names = [s.name for s in b.subtask_types]
    assert on.n_req == 30
    # every classifier slot gets the other classifier as one more subtask
    n_cls = sum(names[m] in ACC for m in on.sub_type[:30])
    assert on.n_sub == 30 + n_cls
    for j in range(30):
        alts = on.var_list[j, : on.var_n[j]]
        assert alts[0] == j
        if names[on.sub_type[j]] in ACC:
            assert len(alts) == 2 and names[on.sub_type[alts[1]]] in ACC
            assert on.sub_type[alts[1]] != on.sub_type[j] and alts[1] >= 30
        else:
            assert len(alts) == 1
    # arrays the requested subtasks share are unchanged
    assert np.array_equal(on.sub_type[:30], off.sub_type)
    assert np.array_equal(on.mem_est[:30], off.mem_est)


def test_variants_per_model_are_the_other_models_own_subtasks():
    """Per model (docs/model.md D7), a variant is the other classifier's subtask: its
    data is the same file, so no subtask is appended when a slot requests it."""
    b = load_bundle(MODEL)
    off = build_params(_cfg(variants=False), b)
    on = build_params(_cfg(variants=True), b)
    names = [s.name for s in b.subtask_types]
    requested = {n for t in b.task_types for n in t.subtasks}
    assert off.n_sub == off.n_req == len(requested) and np.all(off.var_n == 1)
    assert on.n_req == on.n_sub == off.n_sub  # both classifiers are requested somewhere
    for j in range(on.n_req):
        alts = on.var_list[j, : on.var_n[j]]
        assert alts[0] == j
        if names[on.sub_type[j]] in ACC:
            assert len(alts) == 2 and {names[on.sub_type[a]] for a in alts} == set(ACC)
        else:
            assert len(alts) == 1


def _log(rec):
    return (rec.request_user, rec.request_start, rec.request_end, rec.request_outcome)


@pytest.mark.parametrize("scheduler", ["uniform", "affinity", "queue_aware"])
def test_schedulers_that_do_not_choose_are_unaffected_by_variants(scheduler):
    """They serve the requested type and never fetch a variant's data, so the whole
    trajectory is the one without variants."""
    a = Simulation(_cfg(scheduler, False)).run(progress=False)
    b = Simulation(_cfg(scheduler, True)).run(progress=False)
    for x, y in zip(_log(a), _log(b)):
        assert np.array_equal(x, y)
    # the server holds every model (D24), so only its stored data grows: by the variants'
    assert np.array_equal(a.server_consumption[:, :4], b.server_consumption[:, :4])
    assert np.array_equal(a.user_consumption, b.user_consumption)
    p = build_params(_cfg(scheduler, True), load_bundle(MODEL))
    extra = float(p.sub_data_mb[p.n_req:].sum())
    np.testing.assert_allclose(b.server_consumption[:, 4] - a.server_consumption[:, 4], extra, rtol=1e-5)
    served = b.policy_series["subtasks_served"][1]
    assert served.sum() > 0 and np.count_nonzero(served - np.diag(np.diag(served))) == 0


def test_request_accuracy_is_the_requested_models_without_a_choice():
    rec = Simulation(_cfg("uniform", True, users=150, steps=1500)).run(progress=False)
    b = load_bundle(MODEL)
    acc = rec.policy_series["request_accuracy"][1]
    want = []
    for t in b.task_types:
        a = [ACC[s] for s in t.subtasks if s in ACC]
        want.append(sum(a) / len(a))
    done = rec.request_outcome == 0
    assert done.sum() > 20
    np.testing.assert_allclose(acc[done], np.array(want)[rec.request_type[done]], rtol=1e-12)
    assert np.all(np.isnan(acc[~done]))


def test_asrb_accuracy_only_serves_the_more_accurate_variant():
    """lambda = 0 scores A alone: ResNet-50 (0.761) beats MobileNet-V2 (0.718) wherever
    both can run, and the server holds both; lambda = 1 ignores accuracy."""
    acc_only = Simulation(_cfg("asrb", True, {"latency_weight": 0.0})).run(progress=False)
    lat_only = Simulation(_cfg("asrb", True, {"latency_weight": 1.0})).run(progress=False)
    names = acc_only.policy_coords["subtask_type_served"]
    mob, res = names.index("mobilenet_v2"), names.index("resnet50")
    s0 = acc_only.policy_series["subtasks_served"][1]
    assert s0[mob, res] > 0 and s0[mob, mob] < s0[mob, res]
    assert s0[res, mob] < s0[res, res]

    def mean_acc(rec):
        a = rec.policy_series["request_accuracy"][1]
        return np.nanmean(a)

    assert mean_acc(acc_only) > mean_acc(lat_only)
