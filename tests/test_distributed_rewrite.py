"""`rewrite --distributed ddp`: each single-process fixture becomes its DDP script (fixtures/distributed/
X.py -> X.ddp.py), a script that cannot be migrated safely is left byte for byte with its reason."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from cpu2gpu import rewrite_source
from cpu2gpu.cli import main

from .conftest import FIXTURES

DDP_FIXTURES = FIXTURES / "distributed"
PAIRS = sorted(p for p in DDP_FIXTURES.glob("*.py") if not p.name.endswith(".ddp.py")
               and p.with_name(p.stem + ".ddp.py").exists())


def _rewrite(tmp_path, name: str, text: str, *args: str, pyproject: str | None = None):
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    script = tmp_path / name
    script.write_text(text)
    result = CliRunner().invoke(main, ["rewrite", "--in-place", *args, str(script)])
    return result, script.read_text()


def test_the_six_families_are_here():
    assert [p.stem for p in PAIRS] == ["cnn", "resume", "rnn", "trainer", "validation"]
    assert (DDP_FIXTURES / "refused_stream.py").exists()


@pytest.mark.parametrize("path", PAIRS, ids=[p.stem for p in PAIRS])
def test_rewrite_distributed_matches_expected(tmp_path, path):
    result, text = _rewrite(tmp_path, path.name, path.read_text(), "--distributed", "ddp")
    assert result.exit_code == 0, result.output
    assert text == path.with_name(path.stem + ".ddp.py").read_text()
    assert "migrated to DistributedDataParallel; run it with `torchrun --nproc-per-node N" in result.output
    assert "DistributedSampler" in result.output and "set_epoch" in result.output


@pytest.mark.parametrize("path", PAIRS, ids=[p.stem for p in PAIRS])
def test_the_ddp_script_is_a_fixed_point(tmp_path, path):
    expected = path.with_name(path.stem + ".ddp.py").read_text()
    assert rewrite_source(expected) == expected
    result, text = _rewrite(tmp_path, path.name, expected, "--distributed", "ddp")
    assert result.exit_code == 1 and "already distributed" in result.output and text == expected


def test_what_each_family_gets():
    trainer = (DDP_FIXTURES / "trainer.ddp.py").read_text()
    assert "self.model = DDP(self.model, device_ids=[local_rank] if torch.cuda.is_available() else None)" in trainer
    assert "main(total_epochs=3, save_every=2, batch_size=32)" in trainer  # read by the code: kept per process
    assert "ckp = self.model.module.state_dict()" in trainer  # the checkpoint of the bare model
    assert "self.train_data.sampler.set_epoch(epoch)" in trainer
    assert "if dist.get_rank() == 0:\n            torch.save(ckp, \"checkpoint.pt\")\n            print(" in trainer
    resume = (DDP_FIXTURES / "resume.ddp.py").read_text()
    assert "torch.load(CHECKPOINT, map_location=device)" in resume  # each rank onto its own device
    assert "model.module.load_state_dict(checkpoint[\"model\"])" in resume
    rnn = (DDP_FIXTURES / "rnn.ddp.py").read_text()
    assert "sampler=DistributedSampler(train_dataset, shuffle=False)" in rnn  # the data set is made once
    assert "batch_size=max(1, 16 // dist.get_world_size())" in rnn
    validation = (DDP_FIXTURES / "validation.ddp.py").read_text()
    assert "val_loader = DataLoader(val_set, batch_size=48" in validation  # evaluation: the whole set
    assert validation.rstrip().endswith("dist.destroy_process_group()")


REFUSED = {
    "custom sampler": ("import torch\nfrom torch.utils.data import DataLoader, WeightedRandomSampler\n"
                       "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                       "loader = DataLoader(ds, batch_size=4, sampler=WeightedRandomSampler(w, 8))\n"
                       "for epoch in range(2):\n    for x, y in loader:\n        opt.zero_grad()\n"
                       "        model(x).sum().backward()\n        opt.step()\n", "has its own sampler"),
    "no loader": ("import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                  "x = torch.randn(8, 2)\nfor step in range(5):\n    opt.zero_grad()\n    model(x).sum().backward()\n"
                  "    opt.step()\n", "not a DataLoader"),
    "manual gradients": ("import torch\nw = torch.randn(2, requires_grad=True)\nx = torch.randn(8, 2)\n"
                         "for step in range(5):\n    loss = (x @ w).sum()\n    loss.backward()\n"
                         "    with torch.no_grad():\n        w -= 0.1 * w.grad\n", "no torch.optim optimizer"),
    "two models": ("import torch\nfrom torch.utils.data import DataLoader\ng = torch.nn.Linear(2, 2)\n"
                   "d = torch.nn.Linear(2, 1)\nog = torch.optim.Adam(g.parameters())\nod = torch.optim.Adam(d.parameters())\n"
                   "for x in DataLoader(ds):\n    d(g(x)).sum().backward()\n    og.step()\n    od.step()\n",
                   "several models"),
    "own processes": ("import torch\nimport torch.multiprocessing as mp\nmodel = torch.nn.Linear(2, 1)\n"
                      "mp.spawn(train, nprocs=2)\n", "torch.multiprocessing"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refusals_leave_the_file_as_it_is(tmp_path, case):
    source, reason = REFUSED[case]
    result, text = _rewrite(tmp_path, "train.py", source, "--distributed", "ddp")
    assert result.exit_code == 1
    assert text == source
    line = result.output.strip()
    assert "\n" not in line and "train.py: not migrated to DistributedDataParallel: " in line and reason in line


def test_an_iterable_dataset_is_refused_with_the_users_line(tmp_path):
    source = (DDP_FIXTURES / "refused_stream.py").read_text()
    result, text = _rewrite(tmp_path, "stream.py", source, "--distributed", "ddp")
    assert result.exit_code == 1 and text == source
    assert "line 18 reads an IterableDataset" in result.output  # the line in the file as written


def test_config_distributed_and_the_refused_value(tmp_path):
    source = (DDP_FIXTURES / "rnn.py").read_text()
    result, text = _rewrite(tmp_path, "rnn.py", source, pyproject='[tool.cpu2gpu]\ndistributed = "ddp"\n')
    assert result.exit_code == 0 and text == (DDP_FIXTURES / "rnn.ddp.py").read_text()
    result, text = _rewrite(tmp_path, "rnn2.py", source, pyproject='[tool.cpu2gpu]\ndistributed = "fsdp"\n')
    assert result.exit_code == 2 and "distributed must be one of ddp" in result.output


def test_accelerator_style_asks_torch_for_the_backend(tmp_path):
    source = (DDP_FIXTURES / "cnn.py").read_text()
    result, text = _rewrite(tmp_path, "cnn.py", source, "--distributed", "ddp", "--device-style", "accelerator")
    assert result.exit_code == 0, result.output
    assert "dist.init_process_group(dist.get_default_backend_for_device(" in text
    assert "torch.accelerator.set_device_index(local_rank)" in text


def test_names_already_taken_are_not_shadowed(tmp_path):
    source = (DDP_FIXTURES / "cnn.py").read_text().replace("criterion = nn.CrossEntropyLoss()",
                                                           "dist = 3\ncriterion = nn.CrossEntropyLoss()")
    result, text = _rewrite(tmp_path, "cnn.py", source, "--distributed", "ddp")
    assert result.exit_code == 0 and "import torch.distributed as dist" not in text
    assert 'torch.distributed.init_process_group("nccl"' in text and "torch.distributed.get_rank() == 0" in text


def test_a_batch_size_the_code_reads_is_kept_per_process(tmp_path):
    """`x.view(batch_size, -1)` in the model: dividing the loader's batch would break it."""
    source = (DDP_FIXTURES / "cnn.py").read_text().replace("batch_size=64", "batch_size=bs").replace(
        "model = SmallCNN()", "bs = 64\nmodel = SmallCNN()").replace(
        "return self.classifier(torch.flatten(x, 1))", "return self.classifier(x.view(bs, -1))")
    result, text = _rewrite(tmp_path, "cnn.py", source, "--distributed", "ddp")
    assert result.exit_code == 0 and "DataLoader(dataset, batch_size=bs," in text
    assert "batch size `bs` kept per process" in result.output


def test_mkdir_on_every_rank_cannot_race(tmp_path):
    source = (DDP_FIXTURES / "cnn.py").read_text().replace(
        "torch.manual_seed(0)", "import os\nif not os.path.exists('out'):\n    os.mkdir('out')\ntorch.manual_seed(0)")
    result, text = _rewrite(tmp_path, "cnn.py", source, "--distributed", "ddp")
    assert result.exit_code == 0 and "os.makedirs('out', exist_ok=True)" in text


def test_a_notebook_is_refused(tmp_path):
    shutil.copy(FIXTURES / "notebooks" / "linear_regression.ipynb", tmp_path / "nb.ipynb")
    before = (tmp_path / "nb.ipynb").read_bytes()
    result = CliRunner().invoke(main, ["rewrite", "--in-place", "--distributed", "ddp", str(tmp_path / "nb.ipynb")])
    assert result.exit_code == 1 and "does not run under torchrun" in result.output
    assert (tmp_path / "nb.ipynb").read_bytes() == before


def test_accelerator_ddp_needs_torch_2_7(tmp_path):
    """torch 2.6 has torch.accelerator but not set_device_index: accelerator style refused for DDP
    there, and auto falls back to the cuda form."""
    source = (DDP_FIXTURES / "cnn.py").read_text()
    result, text = _rewrite(tmp_path, "cnn.py", source, "--distributed", "ddp", "--device-style", "accelerator",
                            pyproject='[project]\nname = "p"\ndependencies = ["torch>=2.6"]\n')
    assert result.exit_code == 2 and "2.7" in result.output and text == source
    result, text = _rewrite(tmp_path, "cnn.py", source, "--distributed", "ddp", "--device-style", "auto")
    assert result.exit_code == 0 and 'init_process_group("nccl" if torch.cuda.is_available() else "gloo")' in text


def _check_codes(tmp_path, name: str, text: str, *args: str, pyproject: str | None = None):
    import json

    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / name).write_text(text)
    result = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "json", *args, str(tmp_path / name)])
    return [(f["code"], f["line"], f["message"]) for f in json.loads(result.output)]


def test_check_distributed_says_what_the_migration_needs(tmp_path):
    source = (DDP_FIXTURES / "cnn.py").read_text()
    assert not [f for f in _check_codes(tmp_path, "cnn.py", source) if f[0] == "CG400"]  # off unless asked
    found = [f for f in _check_codes(tmp_path, "cnn.py", source, "--distributed", "ddp") if f[0] == "CG400"]
    messages = [message for _, _, message in found]
    assert len(found) == 3
    assert any(m.startswith("`model` trains in one process") for m in messages)
    assert any(m.startswith("training DataLoader without a DistributedSampler") for m in messages)
    assert any(m.startswith("every rank would print this") for m in messages)
    # the same from the configuration
    configured = _check_codes(tmp_path, "cnn.py", source, pyproject='[tool.cpu2gpu]\ndistributed = "ddp"\n')
    assert [f for f in configured if f[0] == "CG400"] == found


def test_check_distributed_gives_the_refusal_and_leaves_ddp_scripts_to_cg40x(tmp_path):
    stream = (DDP_FIXTURES / "refused_stream.py").read_text()
    found = [f for f in _check_codes(tmp_path, "s.py", stream, "--distributed", "ddp") if f[0] == "CG400"]
    assert len(found) == 1 and "IterableDataset" in found[0][2] and found[0][1] == 1
    for path in PAIRS:
        ddp = path.with_name(path.stem + ".ddp.py").read_text()
        assert not [f for f in _check_codes(tmp_path, path.name, ddp, "--distributed", "ddp") if f[0].startswith("CG4")]


def test_a_model_moved_under_a_gpu_flag_is_wrapped_after_the_if(tmp_path):
    """`if use_gpu: model = model.cuda()`: the wrap follows the whole `if`, so that the CPU run wraps
    the model too (and `.module` is always there)."""
    source = ("import torch\nfrom torch.utils.data import DataLoader\nmodel = torch.nn.Linear(4, 1)\n"
              "use_gpu = torch.cuda.is_available()\nif use_gpu:\n    model = model.cuda()\n"
              "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
              "loader = DataLoader(data, batch_size=8)\nfor epoch in range(2):\n    for x, y in loader:\n"
              "        if use_gpu:\n            x, y = x.cuda(), y.cuda()\n        opt.zero_grad()\n"
              "        torch.nn.functional.mse_loss(model(x), y).backward()\n        opt.step()\n"
              "torch.save(model.state_dict(), 'm.pt')\n")
    result, text = _rewrite(tmp_path, "train.py", source, "--distributed", "ddp")
    assert result.exit_code == 0, result.output
    assert ("if use_gpu:\n    model = model.cuda()\nmodel = DDP(model, device_ids=[local_rank] "
            "if torch.cuda.is_available() else None)\n") in text
    assert "use_gpu = torch.cuda.is_available()\n" in text  # the flag stays a flag
    assert "torch.save(model.module.state_dict(), 'm.pt')" in text


def test_a_device_pinned_to_gpu_0_becomes_each_ranks_gpu(tmp_path):
    source = (DDP_FIXTURES / "cnn.py").read_text().replace(
        "torch.manual_seed(0)", "device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')\ntorch.manual_seed(0)")
    result, text = _rewrite(tmp_path, "cnn.py", source, "--distributed", "ddp")
    assert result.exit_code == 0, result.output
    assert "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')" in text
    assert "not GPU 0 for all" in result.output


def test_a_bytes_literal_in_the_device_line_is_read_past(tmp_path):
    # the "cuda:N" search of the device line met a bytes literal with a str pattern: a TypeError
    source = (DDP_FIXTURES / "cnn.py").read_text().replace(
        "torch.manual_seed(0)", "import os\ndevice = torch.device('cuda:0' if torch.cuda.is_available() "
        "and os.environb.get(b'GPU') != b'0' else 'cpu')\ntorch.manual_seed(0)")
    result, text = _rewrite(tmp_path, "cnn.py", source, "--distributed", "ddp")
    assert result.exit_code == 0, result.output
    assert "device = torch.device('cuda' if torch.cuda.is_available() and os.environb.get(b'GPU') != b'0'" in text
