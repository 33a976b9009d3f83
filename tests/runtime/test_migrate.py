"""`cpu2gpu migrate`: the static rewrite, then rounds on the simulated GPU that repair what it missed.

Each kind of evidence has a fixture under fixtures/migrate/ whose static rewrite does not train on
the simulated GPU (asserted, so that a fixture the static pass learns to migrate shows up), and
which migrate proves: the final verify passes against the original on sim and on the CPU fallback.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from cpu2gpu.runtime.judge import migrate as migrate_module  # noqa: E402
from cpu2gpu.runtime.judge.migrate import migrate  # noqa: E402

from ..conftest import HANG_GUARD_S  # noqa: E402

pytestmark = pytest.mark.runtime
MIGRATE = Path(__file__).resolve().parents[2] / "fixtures" / "migrate"
PROJECTS = MIGRATE.parent / "projects"  # the whole-project fixtures: migrated by the static pass alone


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    source = MIGRATE / name if (MIGRATE / name).is_dir() else PROJECTS / name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.expected.py"))
    return target


def _digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _migrate(folder: Path, entry: str, **kw) -> dict:
    return migrate(str(folder / entry), cwd=str(folder), max_steps=5, timeout=HANG_GUARD_S, **kw)


def _kinds(result: dict) -> list:
    return [(m["rule"], m["file"], m["how"]) for m in result["static_misses"]]


def test_the_batches_of_a_loop_over_a_generator_are_moved_at_that_loop(tmp_path):
    """minibatches() of batching.py yields slices of tensors: not a DataLoader, and the static pass
    moves the model only. The run names `xb` at the loss line; migrate moves every CPU tensor the loop
    binds, once, at the loop head."""
    folder = _copy("generator_batches", tmp_path)
    before = _digest(folder)
    result = _migrate(folder, "train.py")
    assert _digest(folder) == before  # nothing written without --in-place
    assert result["rounds"][0]["files"] == ["train.py"]
    assert result["proven"], result["ending"]
    assert _kinds(result) == [("CG102", "train.py", "loop")]
    assert result["static_misses"][0]["line"] == 10
    train = result["changed"][str(folder / "train.py")].decode()
    assert "        xb, yb = xb.to(device), yb.to(device)\n" in train
    assert result["taken_back"] == []


def test_a_loader_handed_back_by_another_file_is_migrated_by_the_static_pass(tmp_path):
    """`train_loader, test_loader = make_loaders()` (data.py), handed to engine.py's functions: the
    batches of a loop over a parameter nothing is known of are moved where they meet the model."""
    folder = _copy("loader_from_function", tmp_path)
    result = _migrate(folder, "main.py")
    assert result["proven"], result["ending"]
    assert len(result["rounds"]) == 1 and result["static_misses"] == []
    assert sorted(Path(p).name for p in result["changed"]) == ["engine.py", "main.py"]


@pytest.mark.slow
def test_a_trainer_class_of_a_package_and_a_method_after_training_by_the_static_pass(tmp_path):
    """A Trainer (not a module) of a package, reached as `import pkg.fitting as fitting`, fits the loader
    given to its method; after training, `model.predict(features[:8]).numpy()`: all static now."""
    folder = _copy("trainer_package", tmp_path)
    result = _migrate(folder, "run.py")
    assert result["proven"], result["ending"]
    assert len(result["rounds"]) == 1 and result["static_misses"] == []
    assert b"features, labels = features.to(" in result["changed"][str(folder / "pkg" / "fitting.py")]
    run = result["changed"][str(folder / "run.py")].decode()
    assert "model.predict(features[:8].to(device)).cpu().numpy()" in run


@pytest.mark.slow
def test_a_plain_tensor_attribute_becomes_a_buffer(tmp_path):
    folder = _copy("forward_mask", tmp_path)
    result = _migrate(folder, "train.py")
    assert result["proven"], result["ending"]
    assert _kinds(result) == [("CG105", "train.py", "attribute")]
    text = result["changed"][str(folder / "train.py")].decode()
    assert 'self.register_buffer("scale", torch.linspace(0.5, 1.5, steps), persistent=False)' in text
    # the training loops are over range(): capped too, so the run reaches the script's end
    assert result["unreached"] == []


@pytest.mark.slow
def test_silent_cpu_training_moves_the_module_and_then_its_inputs(tmp_path):
    """The model comes from getattr(zoo, "tiny")(8), and zoo also has a function that makes a list:
    the static pass cannot tell a module and stays quiet, the sim run trains on the CPU without an
    error; verify's audit is the evidence."""
    folder = _copy("silent_cpu", tmp_path)
    result = _migrate(folder, "fit.py")
    assert result["rounds"][0]["files"] == []
    assert result["proven"], result["ending"]
    assert _kinds(result) == [("CG101", "fit.py", "assign"), ("CG102", "fit.py", "assign"),
                              ("CG107", "fit.py", "host")]
    assert [m["line"] for m in result["static_misses"]] == [8, 6, 16]  # the user's lines, not the draft's
    assert "net(x[:3]).detach().cpu().numpy()" in result["changed"][str(folder / "fit.py")].decode()


@pytest.mark.slow
def test_a_round_that_breaks_the_cpu_fallback_is_taken_back(tmp_path, monkeypatch):
    """An edit that raises on a machine without a GPU is taken back; the next cause is repaired instead."""
    folder = _copy("generator_batches", tmp_path)
    real = migrate_module.repair
    calls = []

    def breaking_then_real(data, evidence):
        fixed = real(data, evidence)
        if not calls and fixed is not None:
            calls.append(evidence)
            fixed.data += b"\nif not torch.cuda.is_available():\n    raise SystemExit(7)\n"
        return fixed

    monkeypatch.setattr(migrate_module, "repair", breaking_then_real)
    result = _migrate(folder, "train.py")
    assert len(result["taken_back"]) == 1
    assert "exited with code 7" in result["taken_back"][0]["taken_back"]
    for new in result["changed"].values():
        assert b"SystemExit(7)" not in new


@pytest.mark.slow  # two verify children of a failing original, ~10 s
def test_an_original_that_fails_is_unproven_and_nothing_is_written(tmp_path, cli):
    folder = _copy("original_fails", tmp_path)
    before = _digest(folder)
    code, out, err = cli("migrate", str(folder / "train.py"), "--in-place", "--output-format", "json")
    assert code == 3, (out, err)
    data = json.loads(out)
    assert not data["proven"] and data["written"] == []
    assert data["cannot_run"].startswith("the original does not run here")
    assert _digest(folder) == before


@pytest.mark.slow
def test_in_place_writes_the_proven_files_only_at_the_end(tmp_path, cli):
    folder = _copy("loader_from_function", tmp_path)
    original = {p: (folder / p).read_bytes() for p in ("main.py", "engine.py", "data.py", "model.py")}
    code, out, err = cli("migrate", str(folder / "main.py"), "--in-place")
    assert code == 0, (out, err)
    assert "Wrote" in out
    assert (folder / "data.py").read_bytes() == original["data.py"]
    assert (folder / "model.py").read_bytes() == original["model.py"]
    assert b"inputs, targets = inputs.to(" in (folder / "engine.py").read_bytes()
    # a second migration finds nothing to do: proven at round 0
    code, out, err = cli("migrate", str(folder / "main.py"), "--output-format", "json")
    data = json.loads(out)
    assert code == 0 and data["proven"] and len(data["rounds"]) == 1 and data["changed_files"] == []


# -- causes no name binds: the static rewrite leaves each, the run locates it ---------------------


@pytest.mark.slow
def test_a_device_tensor_handed_to_numpy_gets_cpu_on_that_argument(tmp_path):
    """Predictions kept in a dict reach np.ptp / np.asarray: no `.numpy()` on the line, and nothing the
    static pass can follow out of the dict."""
    folder = _copy("host_numpy", tmp_path)
    result = _migrate(folder, "fit.py")
    assert result["proven"], result["ending"]
    assert _kinds(result) == [("CG107", "fit.py", "host")]
    fit = result["changed"][str(folder / "fit.py")].decode()
    assert 'print("spread", np.ptp(first.cpu()), np.asarray(first.cpu()).max())' in fit


@pytest.mark.slow
def test_a_data_sets_tensor_attributes_are_moved_where_they_meet_the_model(tmp_path):
    folder = _copy("dataset_attributes", tmp_path)
    result = _migrate(folder, "train.py")
    assert result["proven"], result["ending"]
    assert {m["how"] for m in result["static_misses"]} == {"use"}
    train = result["changed"][str(folder / "train.py")].decode()
    assert ("net(sales.features.to(device), sales.groups.to(device)), sales.targets.to(device))" in train)
    assert 'net(held_out["x"].to(device), held_out["g"].to(device)), held_out["y"].to(device))' in train
    assert str(folder / "regions.py") not in result["changed"]


@pytest.mark.slow
def test_a_numpy_mask_in_a_module_method_is_made_on_the_inputs_device(tmp_path):
    folder = _copy("forward_numpy_mask", tmp_path)
    result = _migrate(folder, "train.py")
    assert result["proven"], result["ending"]
    assert _kinds(result) == [("CG104", "train.py", "conversion")]
    train = result["changed"][str(folder / "train.py")].decode()
    assert "torch.from_numpy(np.triu(np.ones((n, n), dtype=bool), k=1)).to(k.device)" in train


@pytest.mark.slow
def test_raw_parameters_in_a_dict_are_made_on_the_device(tmp_path):
    """No module: the run trains the optimizer's tensors on the CPU. They get device= on their factories
    (a .to() copy is no leaf), then the data meets them and is moved after its unpacking."""
    folder = _copy("raw_parameters", tmp_path)
    result = _migrate(folder, "train.py")
    assert result["proven"], result["ending"]
    assert _kinds(result) == [("CG102", "train.py", "factory"), ("CG102", "train.py", "unpack")]
    train = result["changed"][str(folder / "train.py")].decode()
    assert ('params = {"w": torch.randn(3, 1, requires_grad=True, device=device), '
            '"b": torch.zeros(1, requires_grad=True, device=device)}') in train
    assert "x, y = x.to(device), y.to(device)" in train


@pytest.mark.slow
def test_a_list_of_buffers_kept_through_their_locals_gets_cg114s_fix(tmp_path):
    folder = _copy("stale_buffer_list", tmp_path)
    result = _migrate(folder, "train.py")
    assert result["proven"], result["ending"]
    assert ("CG114", "train.py", "rule") in _kinds(result)
    train = result["changed"][str(folder / "train.py")].decode()
    assert "return self.fc((x - self.center) / self.scale)" in train


@pytest.mark.slow
def test_a_model_handed_through_two_functions_is_moved_where_the_caller_binds_it(tmp_path):
    """A model from a decorator-filled registry reaches train(config, model, ...) through run_experiment():
    the run follows the parameter out, frame by frame, to main.py's `model = create(...)`."""
    folder = _copy("model_through_functions", tmp_path)
    result = _migrate(folder, "main.py")
    assert result["proven"], result["ending"]
    assert ("CG101", "main.py", "assign") in _kinds(result)
    assert 'model = create(config["model"], width=16).to(device)\n' in result["changed"][str(folder / "main.py")].decode()


EMBEDDING_AND_STATE = """import torch
import torch.nn as nn

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 4)
        self.gru = nn.GRU(4, 4)

    def forward(self, token, hidden):
        return self.gru(self.embedding(token).view(1, 1, -1), hidden)


encoder = Encoder().to(device)
hidden = torch.zeros(1, 1, 4)
idx = torch.tensor([3])
output, hidden = encoder(idx, hidden)
"""


def test_the_cause_names_the_operand_the_failing_op_received(tmp_path):
    """Both the hidden state and the indices are on the CPU where the encoder is called; the embedding
    fails first, on its indices: the cause names `idx`, not the `hidden` the line reads first."""
    from cpu2gpu.runtime.judge.verify import verify

    (tmp_path / "enc.py").write_text(EMBEDDING_AND_STATE)
    report = verify(str(tmp_path / "enc.py"), cwd=str(tmp_path), device="sim", timeout=HANG_GUARD_S)
    causes = [r["cause"] for r in report["reasons"]]
    assert causes and causes[0].startswith("idx stayed on the CPU at enc.py:20"), causes


@pytest.mark.slow
def test_an_edit_that_leaves_the_same_failure_is_taken_back(tmp_path, monkeypatch):
    """An edit that does not change the failure (here: a comment) is taken back, and the value is not
    tried again."""
    folder = _copy("generator_batches", tmp_path)
    real = migrate_module.repair

    def ineffective(data, evidence):
        fixed = real(data, evidence)
        if fixed is not None:
            fixed.data = data + b"\n# moved\n"
        return fixed

    monkeypatch.setattr(migrate_module, "repair", ineffective)
    result = _migrate(folder, "train.py")
    assert not result["proven"]
    assert result["taken_back"] and result["taken_back"][0]["taken_back"].startswith("the same failure remained")
    assert all(b"# moved" not in new for new in result["changed"].values())


@pytest.mark.slow
def test_a_notebook_is_repaired_in_its_cells_and_the_rest_is_kept(tmp_path, cli):
    """The batches of a generator defined in cell 2 and looped over in cell 4: the repair round moves them
    at the loop head, in cell 4; the report gives cell and line; outputs, metadata, the markdown cell and
    the IPython line are kept."""
    folder = _copy("notebook_generator", tmp_path)
    notebook = folder / "regression.ipynb"
    before = json.loads(notebook.read_text())
    code, out, err = cli("migrate", str(notebook), "--in-place", "--output-format", "json", "-q")
    assert code == 0, out + err
    result = json.loads(out)
    assert [(r["rule"], r["bound_at"].rsplit("/", 1)[-1], r["how"]) for r in result["rounds"][1:]] == \
        [("CG102", "regression.ipynb:cell 4:2", "loop")]
    after = json.loads(notebook.read_text())
    assert "        xb, yb = xb.to(device), yb.to(device)\n" in after["cells"][4]["source"]
    assert "%matplotlib inline\n" in after["cells"][3]["source"]
    for old, new in zip(before["cells"], after["cells"]):
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
    assert before["cells"][0] == after["cells"][0] and before["metadata"] == after["metadata"]


SUBFOLDER_SCRIPT = """import torch

rows = [list(map(float, line.split())) for line in open("../data/points.txt")]
x = torch.tensor(rows)
y = x.sum(dim=1, keepdim=True)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(4):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, loss.item())
"""


@pytest.mark.slow
def test_a_script_run_from_a_subfolder_of_its_repository_reads_the_data_above_it(tmp_path):
    """`cd repo/train && python fit.py` reading ../data: the runs copy the repository (a small one), not
    only the working folder, so the original runs and the migration is judged."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "data").mkdir()
    (repo / "data" / "points.txt").write_text("".join(f"{i % 3} {i % 5} {i % 7}\n" for i in range(24)))
    (repo / "train").mkdir()
    (repo / "train" / "fit.py").write_text(SUBFOLDER_SCRIPT)
    result = migrate(str(repo / "train" / "fit.py"), cwd=str(repo / "train"), max_steps=3, timeout=HANG_GUARD_S)
    assert result["proven"], result["ending"]
    assert result["cannot_run"] is None


@pytest.mark.slow
def test_a_script_that_uses_the_gpu_only_when_asked_is_proven_with_its_flag(tmp_path):
    """`--cuda` (off by default) picks the device: the run on the device is given it, the original and the
    CPU fallback run as the user runs them, and the report names the flag."""
    folder = _copy("opt_in_flag", tmp_path)
    result = _migrate(folder, "train.py")
    assert result["proven"], result["ending"]
    assert result["device_flag"] == "--cuda" and "with --cuda" in result["ending"]
    runs = {r["label"]: r for r in result["verify"]["runs"]}
    assert runs["migrated (sim)"]["device_forward_calls"] > 0
    assert result["verify"]["settings"]["args"] == []


@pytest.mark.slow
def test_a_cpu_gradient_for_a_device_output_is_located_and_made_on_the_device(tmp_path):
    """torch.autograd.grad(..., grad_outputs=torch.ones(y.size())): CUDA raises "invalid gradient at index 0
    - expected device cuda:0 but got cpu"; the simulated device raises the same (its worker thread used to
    abort the process) and the repair gives the penalty's weight the device of its input."""
    folder = _copy("gradient_penalty", tmp_path)
    result = _migrate(folder, "train.py")
    assert result["proven"], result["ending"]
    assert ("CG104", "train.py", "assign") in _kinds(result)
    assert "weight = torch.ones(y.size(), device=x.device)" in result["changed"][str(folder / "train.py")].decode()


@pytest.mark.slow
def test_the_same_forward_line_reached_from_another_loop_is_another_failure(tmp_path):
    """The model (getattr on zoo, which also makes a list: no static finding) is moved, then the training
    loop's batch; the run then fails at the same line of Tiny.forward, reached from accuracy()'s loop. That
    is progress, not 'the same failure': the edit stays and the helper's batch is moved next."""
    folder = _copy("two_loops", tmp_path)
    result = _migrate(folder, "train.py")
    assert result["proven"], result["ending"]
    assert result["taken_back"] == []
    assert [(r["file"], r["line"], r["how"]) for r in result["rounds"][1:]] == [
        ("train.py", 9, "assign"), ("train.py", 21, "loop"), ("train.py", 15, "loop")]
