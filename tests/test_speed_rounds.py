"""migrate --speed's rounds (runtime/judge/speedup.py) with verify replaced by written reports: which edit is kept,
which is taken back and why, in which order. No torch, no run."""

from __future__ import annotations

import textwrap

from cpu2gpu.runtime.judge import speedup

SCRIPT = textwrap.dedent("""\
    import torch
    from torch.utils.data import DataLoader

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


    def main(data, model):
        loader = DataLoader(data, batch_size=64)
        total = 0.0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = model(x, y)
            total += loss.item()
        print(float(total))


    if __name__ == "__main__":
        main([], None)
""").encode()
PATH = "/u/train.py"


def cause(kind, line, seconds, source="", **extra):
    return {"kind": kind, "copied": extra.pop("copied", ""), "source_bytes": 0, "dtypes": extra.pop("dtypes", []),
            "file": "train.py", "line": line, "source": source, "per_step": 1, "bytes_per_step": 0,
            "seconds": seconds, "share": extra.pop("share", 0.1), "what": f"{kind} at {line}", "fix": "the fix",
            **extra}


def report(causes, losses=(1.0, 0.9, 0.8), verdict="pass", step_s=0.01, workers=0):
    profile = {"places": [{"file": "train.py", "line": 8, "source": ""}],
               "loaders": [{"place": 0, "num_workers": workers}]}
    runs = [{"role": "original", "mode": "cpu", "label": "original (cpu)", "status": "ok"},
            {"role": "migrated", "mode": "sim", "label": "migrated (sim)", "status": "ok", "losses": list(losses),
             "speed": profile},
            {"role": "migrated", "mode": "cpu", "label": "migrated (cpu)", "status": "ok"}]
    return {"verdict": verdict, "reasons": [] if verdict == "pass" else [{"cause": "it failed", "run": "x"}],
            "runs": runs, "speed": {"gpu": "H100 SXM", "causes": causes, "summary": f"{len(causes)} causes",
                                    "estimate": {"step_s": step_s, "idle_fraction": 0.9}}}


class Draft:
    """The draft's one file, and the reports verify would give, in order."""

    def __init__(self, answers):
        self.data = SCRIPT
        self.answers = list(answers)
        self.verified: list[bytes] = []

    def run(self, **kwargs):
        return speedup.speed_rounds(
            kwargs.pop("first"), read=lambda path: self.data, write=self.write, user_path=lambda shown: PATH,
            shown=lambda path: "train.py", device_line=lambda path: 4, run_verify=self.verify,
            original_line=lambda path, now, line: line)

    def write(self, path, data):
        assert path == PATH
        self.data = data

    def verify(self):
        self.verified.append(self.data)
        return self.answers.pop(0)


def test_the_first_form_that_keeps_the_losses_stays_and_the_next_cause_follows():
    loader = cause("loader", 8, 0.05, source="loader = DataLoader(data, batch_size=64)")
    total = cause("sync", 13, 0.001, source="total += loss.item()", dtypes=["float32"])
    draft = Draft([
        report([], losses=(1.0, 0.95, 0.8)),  # workers + persistent: the losses change
        report([total]),  # workers alone: same losses, the loader gone; the sync is now the first cause
        report([]),  # the running sum on the device
    ])
    final, story = draft.run(first=report([loader, total], step_s=0.06))
    assert [e["kind"] for e in story["edits"]] == ["workers", "sum_on_device"]
    assert story["edits"][0]["edit"] == "loader = DataLoader(data, batch_size=64, num_workers=4)"
    assert story["edits"][1]["edit"] == "total += loss.detach().double()"
    taken_back = story["not_edited"][0]
    assert taken_back["kind"] == "workers" and "persistent_workers=True" in taken_back["edit"]
    assert taken_back["why"] == "the losses changed (the device run's, first at step 2: 0.9 before, 0.95 after)"
    assert len(draft.verified) == 3 and b"num_workers=4)" in draft.data and b"float(total)" in draft.data
    assert story["before"]["step_s"] == 0.06 and story["after"]["step_s"] == 0.01 and final["speed"]["causes"] == []
    assert story["losses_same"] == 3


def test_an_edit_whose_cause_remains_or_whose_run_fails_is_taken_back_and_the_file_restored():
    loader = cause("loader", 8, 0.05, source="loader = DataLoader(data, batch_size=64)")
    still = cause("loader", 8, 0.04, source="loader = DataLoader(data, batch_size=64, num_workers=4, "
                                             "persistent_workers=True)")
    draft = Draft([report([still]), report([], verdict="fail")])
    _, story = draft.run(first=report([loader]))
    assert story["edits"] == [] and draft.data == SCRIPT
    whys = [e["why"] for e in story["not_edited"]]
    assert whys[0].startswith("the cause remained") and whys[1] == "verify no longer passes: it failed"


def test_causes_without_an_edit_are_listed_with_their_reason_and_cost_no_run():
    made = cause("made", 11, 0.01, copied="made")
    small = cause("copy", 11, 0.0001, copied="batch", share=0.008)  # 0.8% of the step: not worth an edit
    launches = cause("launches", 12, 0.01)
    workers_have = cause("loader", 8, 0.05)
    draft = Draft([])
    _, story = draft.run(first=report([workers_have, made, launches, small], workers=2))
    assert draft.verified == [] and story["edits"] == []
    whys = {e["cause"]: e["why"] for e in story["not_edited"]}
    assert whys["copy"].startswith("it explains 0.80% of the estimated step, under 1%: not worth an edit")
    assert whys["loader"].startswith("its DataLoader already has workers")
    assert whys["made"].startswith("no torch factory moved with .to(device)")
    assert whys["launches"] == "no automatic edit: the fix"
