"""Training without an optimizer object is training: an update by hand of a leaf that requires grad
(``w1 -= lr * w1.grad`` under no_grad, ``w.data -= lr * w.grad.data``, ``p.data.add_(p.grad, alpha=-lr)``),
after a backward, is a step; so is a rebinding of it (``x = x - lr * x.grad``, ``w.data = w.data - ...``),
and, with no autograd at all, an update of a loop's weights by gradients computed by hand
(``w1 -= lr * grad_w1``, ``a = a - lr * grad_a``); --against compares their losses and --max-steps caps them.

The fixtures (fixtures/runtime/manual_steps/) train 20 rounds of backward (or loss) and update."""

import pytest

torch = pytest.importorskip("torch")

from cpu2gpu.runtime.steps.handgradients import losses_of  # noqa: E402
from cpu2gpu.runtime.steps.manualsteps import ManualSteps  # noqa: E402
from cpu2gpu.runtime.steps.updatesites import sites_of, target_key  # noqa: E402
from cpu2gpu.runtime.judge.verify import verify  # noqa: E402

from ..conftest import FIXTURES  # noqa: E402

pytestmark = pytest.mark.runtime
MANUAL = FIXTURES / "runtime" / "manual_steps"
ROUNDS = 20
# the three ways the courses teach it: the tutorial's two-layer net, .data, p.data.add_ over a module
KINDS = ("tutorial", "data", "module")
# the updates that rebind, and the gradients computed by hand: the kind of step each shows
NEW_KINDS = {"rebinding": "rebinding", "detach": "rebinding", "data_assign": "rebinding",
             "hand_gradients": "hand-computed gradients", "hand_gradients_rebinding": "hand-computed gradients"}


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

    def on_step(self, leaf, frame, kind, loss) -> bool:
        assert kind == "in place" and loss is None
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


# -- which statements update by hand, read from the source (no torch run) ---------------------------


def _sites(source: str) -> dict:
    """Each update site of ``source``: its target, whether it rebinds, and its losses (hand gradients)."""
    return {(target_key(s.target), s.stmt.lineno): (s.rebind, losses_of(s)) for s in sites_of(source)}


def test_a_rebinding_is_an_update_and_a_new_value_is_not():
    sites = _sites(
        "x = x - lr * x.grad\n"
        "w = (w - lr * w.grad).detach().requires_grad_(True)\n"
        "w.data = w.data - lr * w.grad\n"
        "adv = x + eps * x.grad.sign()\n"  # a new value: FGSM's perturbed input
        "x = y - lr * x.grad\n"
        "x = x * decay\n")
    assert sites == {("x", 1): (True, ()), ("w", 2): (True, ()), ("w.data", 3): (True, ())}


def test_the_weights_of_a_loop_with_gradients_by_hand_are_found_with_their_loss():
    for script in ("hand_gradients_original.py", "hand_gradients_rebinding_original.py"):
        sites = _sites((MANUAL / script).read_text())
        assert sites and all(losses == ("loss",) for _, losses in sites.values()), (script, sites)
    assert {k for k, _ in _sites((MANUAL / "hand_gradients_rebinding_original.py").read_text())} == set("abcd")


def test_loops_that_update_tensors_without_training_have_no_steps():
    # an evaluation's sum, running statistics, an RNN's hidden state (fixtures), and more of the family
    sites = _sites((MANUAL / "not_training.py").read_text())
    assert {k for k, _ in sites} == {"total", "running_mean", "h", "seq_loss"}
    assert all(losses == () for _, losses in sites.values()), sites
    more = _sites(
        "for xb, yb in batches:\n"
        "    xb = xb + 0.1 * torch.randn_like(xb)\n"  # data augmentation: the noise comes from no forward
        "    pred = xb.mm(w)\n"
        "    loss = (pred - yb).pow(2).mean()\n"
        "    ema = ema + 0.01 * (w - ema)\n"  # an average of the weights: no loss comes from it
        "    h = torch.tanh(xb.mm(u) + h.mm(v))\n"  # recomputed: a value, not a weight
        "    h += 0.1 * pred.mean()\n"
        "    z = xb.mm(u)\n"  # recomputed, then refined through its own loss: a value, not a weight
        "    out = z.mm(v)\n"
        "    energy = out.pow(2).mean()\n"
        "    z -= 0.1 * out.mm(v.t())\n"
        "for x_t, y_t in zip(xs, ys):\n"  # a leaky RNN: its state's update is its own forward, not the loss's
        "    s = s + 0.5 * torch.tanh(x_t.mm(w_xs) + s.mm(w_ss))\n"
        "    step_loss = (s.mm(w_sy) - y_t).pow(2).sum()\n"
        "    step_losses.append(step_loss)\n")
    assert {k for k, _ in more} == {"xb", "ema", "h", "z", "s"}
    assert all(losses == () for _, losses in more.values()), more


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



def _ran_by_hand(run: dict, kind: str, steps: int) -> None:
    assert run["status"] in ("ok", "max_steps") and run["steps"] == steps and len(run["losses"]) == steps
    assert run["step_kinds"] == {kind: steps}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NEW_KINDS))
def test_rebinding_and_hand_gradient_steps_are_counted_compared_and_capped(name):
    report = _verify(f"{name}_migrated.py", against=f"{name}_original.py", max_steps=3)
    assert report["verdict"] == "pass", report["reasons"]
    original, migrated = report["runs"]
    for run in (original, migrated):
        _ran_by_hand(run, NEW_KINDS[name], 3)
        assert run["cap"]["reached"] and run["cap"]["ended"] == "end" and run["cap"]["lines_after_cap"] > 0
    assert migrated["trained_devices"] == ["cuda:0"]
    assert original["losses"] == migrated["losses"]


def test_gradients_computed_by_hand_train_the_whole_loop_and_learn_as_the_original():
    report = _verify("hand_gradients_migrated.py", against="hand_gradients_original.py")
    assert report["verdict"] == "pass", report["reasons"]
    original, migrated = report["runs"]
    for run in (original, migrated):
        _ran_by_hand(run, "hand-computed gradients", ROUNDS)
    assert original["losses"][0] > original["losses"][-1]  # the loss of each step: it learns
    [c] = report["comparisons"]
    assert c["ok"] and c["compared"] == ROUNDS


@pytest.mark.slow
def test_loops_that_train_nothing_show_no_step():
    report = _verify("not_training.py", max_steps=3)
    [run] = report["runs"]
    assert run["status"] == "ok" and run["steps"] == 0 and run["step_kinds"] == {}
    assert report["verdict"] == "fail" and "no training step ran" in report["reasons"][0]["cause"]
