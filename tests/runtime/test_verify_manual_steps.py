"""Training without an optimizer object is training: an update by hand of a leaf that requires grad
(``w1 -= lr * w1.grad`` under no_grad, ``w.data -= lr * w.grad.data``, ``p.data.add_(p.grad, alpha=-lr)``),
after a backward, is a step; --against compares its losses and --max-steps caps it.

The fixtures (fixtures/runtime/manual_steps/) train 20 rounds of backward and update."""

import pytest

torch = pytest.importorskip("torch")

from cpu2gpu.runtime.manualsteps import ManualSteps  # noqa: E402
from cpu2gpu.runtime.verify import verify  # noqa: E402

from ..conftest import FIXTURES  # noqa: E402

pytestmark = pytest.mark.runtime
MANUAL = FIXTURES / "runtime" / "manual_steps"
ROUNDS = 20
# the three ways the courses teach it: the tutorial's two-layer net, .data, p.data.add_ over a module
KINDS = ("tutorial", "data", "module")


def _verify(script: str, **kw) -> dict:
    kw.setdefault("device", "sim")
    if kw.get("against"):
        kw["against"] = str(MANUAL / kw["against"])
    return verify(str(MANUAL / script), cwd=str(MANUAL), jobs=1, timeout=300, **kw)


def _line_of(script: str, text: str) -> int:
    with open(MANUAL / script) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


# -- the rounds, in process (no torch patched: ManualSteps is driven by hand) ------------------------


class _Steps:
    def __init__(self, allow: bool = True, optimizer: bool = False):
        self.taken: list = []
        self.allow = allow
        self.optimizer = optimizer
        self.ms = ManualSteps(self.on_step, lambda: self.optimizer)

    def on_step(self, leaf, frame) -> bool:
        self.taken.append(leaf)
        return self.allow

    def update(self, t) -> bool:
        """What the wrapped in-place method does before running: whether the update runs."""
        return not (self.ms.armed or self.ms.skipping) or self.ms.before_update(t, None)


def _backward(steps: _Steps, *leaves):
    loss = sum((w * w).sum() for w in leaves)
    steps.ms.on_backward(loss)
    loss.backward()


def test_one_step_per_round_of_backward_and_updates():
    s = _Steps()
    w1, w2 = torch.randn(3, requires_grad=True), torch.randn(2, requires_grad=True)
    with torch.no_grad():
        assert s.update(w1)  # initialisation before any backward: no step
    assert s.taken == []
    for _ in range(3):
        _backward(s, w1, w2)
        with torch.no_grad():
            assert s.update(w1) and s.update(w2)  # w1 closes the round, w2 belongs to it
    assert s.taken == [w1, w1, w1]


def test_an_update_through_data_is_a_step_and_other_tensors_are_not():
    s = _Steps()
    w = torch.randn(4, requires_grad=True)
    _backward(s, w)
    counter = torch.zeros(())  # `correct += (pred == y).sum()`: an ordinary in-place op
    assert s.update(counter) and s.update(w.grad) and s.taken == []
    assert s.update(w.data) and s.taken == [w]


def test_no_step_with_grad_enabled_or_after_an_optimizer_stepped():
    s = _Steps()
    w = torch.randn(2, requires_grad=True)
    _backward(s, w)
    s.update(w)  # in-place on a leaf with grad enabled: torch raises, nothing trains
    assert s.taken == []
    s.optimizer = True  # the script trains with an optimizer: x.data += eps * x.grad is no step
    _backward(s, w)
    assert s.update(w.data) and s.taken == []


def test_a_capped_round_skips_all_its_updates():
    s = _Steps(allow=False)
    w1, w2 = torch.randn(2, requires_grad=True), torch.randn(2, requires_grad=True)
    _backward(s, w1, w2)
    with torch.no_grad():
        assert not s.update(w1) and not s.update(w2.data)
    assert s.taken == [w1]  # asked once per round
    assert s.update(torch.zeros(1))  # other tensors still update


# -- verify ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_a_migrated_manual_step_script_passes_and_learns_as_the_original(kind):
    report = _verify(f"{kind}_migrated.py", against=f"{kind}_original.py")
    assert report["verdict"] == "pass", report["reasons"]
    original, migrated = report["runs"]
    for run in (original, migrated):
        assert run["status"] == "ok" and run["steps"] == ROUNDS and len(run["losses"]) == ROUNDS
    assert migrated["trained_devices"] == ["cuda:0"]
    [c] = report["comparisons"]
    assert c["ok"] and c["compared"] == ROUNDS and original["losses"] == migrated["losses"]


@pytest.mark.slow
def test_max_steps_caps_the_updates_by_hand_and_the_code_after_runs():
    report = _verify("tutorial_migrated.py", against="tutorial_original.py", max_steps=3)
    assert report["verdict"] == "pass", report["reasons"]
    for run, script in zip(report["runs"], ("tutorial_original.py", "tutorial_migrated.py")):
        cap = run["cap"]
        assert run["status"] == "max_steps" and run["steps"] == 3 and len(run["losses"]) == 3
        assert cap["reached"] and cap["ended"] == "end"
        assert cap["at"]["line"] == _line_of(script, "w1 -= learning_rate * w1.grad")
        assert cap["lines_after_cap"] > 0  # the loop ended at the cap and the final print ran
    original, migrated = report["runs"]
    assert original["losses"] == migrated["losses"]


@pytest.mark.slow
def test_a_tensor_left_on_the_cpu_still_fails():
    report = _verify("tutorial_bug.py")
    assert report["verdict"] == "fail"
    [reason] = report["reasons"]
    assert reason["rule"] == "CG102"
    assert "w2" in reason["cause"]
    assert reason["where"] == {"file": "tutorial_bug.py", "line": _line_of("tutorial_bug.py", "x.mm(w1)")}

