"""migrate --speed's static half (cpu2gpu.migration.speededits): each edit at the line a run named, only in
the forms known to keep the numbers, and a reason where the code gets none. No torch, no run."""

from __future__ import annotations

import textwrap

from cpu2gpu.migration import speededits


def src(text: str) -> bytes:
    return textwrap.dedent(text).lstrip("\n").encode()


LOADER = src("""
    import torch
    from torch.utils.data import DataLoader

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


    def main(data):
        loader = DataLoader(data, batch_size=64,
                            shuffle=False)
        for x, y in loader:
            x, y = x.to(device), y.cuda()


    if __name__ == "__main__":
        main([])
""")


def test_workers_for_a_loader_on_the_main_process_persistent_first_then_without():
    forms = speededits.workers(LOADER, 8)
    assert isinstance(forms, list) and [f.kind for f in forms] == ["workers", "workers"]
    first, second = (f.data.decode() for f in forms)
    assert "shuffle=False, num_workers=4, persistent_workers=True)" in first
    assert "num_workers=4)" in second and "persistent_workers" not in second
    # nothing else changed: the call's own layout stays, and the rest of the file is byte for byte the same
    assert first.replace(", num_workers=4, persistent_workers=True", "") == LOADER.decode()
    assert forms[0].line == 8 and forms[0].edit == "loader = DataLoader(data, batch_size=64,"


def test_workers_need_a_main_guard_and_leave_the_scripts_own_setting():
    unguarded = LOADER.replace(b'if __name__ == "__main__":\n    main([])', b"main([])")
    why = speededits.workers(unguarded, 8)
    assert isinstance(why, str) and "__main__" in why and "spawn" in why
    set_by_script = LOADER.replace(b"shuffle=False)", b"shuffle=False, num_workers=args.workers)")
    why = speededits.workers(set_by_script, 8)
    assert isinstance(why, str) and "args.workers" in why
    literal_zero = LOADER.replace(b"shuffle=False)", b"shuffle=False, num_workers=0)")
    forms = speededits.workers(literal_zero, 8)
    assert isinstance(forms, list) and b"num_workers=4, persistent_workers=True)" in forms[0].data
    assert isinstance(speededits.workers(LOADER.replace(b"batch_size=64", b"**options"), 8), str)
    assert isinstance(speededits.workers(LOADER, 3), str)  # no DataLoader there


def test_pinned_batches_get_pin_memory_and_non_blocking_moves():
    forms = speededits.pinned(LOADER, [8], 11)
    assert isinstance(forms, list)
    text = forms[0].data.decode()
    assert "shuffle=False, pin_memory=torch.cuda.is_available())" in text  # as the rewrite writes it
    assert "x, y = x.to(device, non_blocking=True), y.cuda(non_blocking=True)" in text
    assert forms[0].edit == "x, y = x.to(device, non_blocking=True), y.cuda(non_blocking=True)"
    # a loader pinned already (by the rewrite) keeps its setting: only the moves change
    pinned = LOADER.replace(b"shuffle=False)", b"shuffle=False, pin_memory=torch.cuda.is_available())")
    forms = speededits.pinned(pinned, [8], 11)
    assert isinstance(forms, list) and forms[0].data.count(b"pin_memory") == 1 and b"non_blocking=True" in forms[0].data
    aliased = LOADER.replace(b"import torch\n", b"import torch as th\n")
    assert b"pin_memory=th.cuda.is_available()" in speededits.pinned(aliased, [8], 11)[0].data  # type: ignore[index]
    # a move that already says non_blocking, or a loader not found, gives no edit
    done = LOADER.replace(b"x.to(device), y.cuda()", b"x.to(device, non_blocking=True)")
    assert isinstance(speededits.pinned(done, [8], 11), str)
    assert isinstance(speededits.pinned(LOADER, [], 11), str)


def test_a_factory_moved_every_step_is_made_on_the_device_unless_it_draws_or_copies_host_data():
    code = src("""
        import torch
        for i in range(3):
            mask = torch.ones(4, 4).to(device)
            noise = torch.randn(4, generator=g).to(device)
            y = torch.tensor(labels[i]).to(device)
    """)
    forms = speededits.on_device(code, 3)
    assert isinstance(forms, list) and forms[0].edit == "mask = torch.ones(4, 4, device=device)"
    drawn = speededits.on_device(code, 4)
    assert isinstance(drawn, str) and "generator" in drawn and "changes the numbers" in drawn
    host = speededits.on_device(code, 5)
    assert isinstance(host, str) and "torch.tensor copies its host data" in host
    legacy = speededits.on_device(src("""
        for i in range(3):
            y = torch.LongTensor(labels[i]).to(device)
    """), 2)
    assert isinstance(legacy, str) and "torch.LongTensor copies its host data" in legacy  # no draw


SUMS = src("""
    def train(loader, model):
        running = 0.0
        correct = 0
        for i, (x, y) in enumerate(loader):
            loss = model(x)
            running += loss.item()
            correct += (x == y).sum().item()
            if i % 10 == 9:
                print(f"loss {running / 10:.3f}")
                running = 0.0
        return correct / len(loader)
""")


def test_a_running_sum_stays_on_the_device_and_is_read_where_the_script_reads_it():
    forms = speededits.sum_on_device(SUMS, 6, floating=True)
    assert isinstance(forms, list)
    text = forms[0].data.decode()
    assert "running += loss.detach().double()" in text  # float64, as Python's float sums it
    assert 'print(f"loss {float(running) / 10:.3f}")' in text
    assert "running = 0.0" in text  # a store stays a store
    assert "correct += (x == y).sum().item()" in text  # the other sum is another cause's edit
    counts = speededits.sum_on_device(SUMS, 7)  # an integer count stays in its own dtype
    assert isinstance(counts, list) and "correct += (x == y).sum().detach()\n" in counts[0].data.decode()
    assert "return float(correct) / len(loader)" in counts[0].data.decode()


def test_no_running_sum_edit_where_the_name_escapes_its_function_or_the_line_is_no_sum():
    escaped = SUMS + src("""
        def report():
            return running
    """)
    why = speededits.sum_on_device(escaped, 6)
    assert isinstance(why, str) and "outside the function" in why
    appended = src("""
        losses = []
        for x in data:
            losses.append(model(x).item())
    """)
    assert isinstance(speededits.sum_on_device(appended, 3), str)
    two_reads = SUMS.replace(b"running += loss.item()", b"running += loss.item() + aux.item()")
    assert isinstance(speededits.sum_on_device(two_reads, 6), str)


def test_cudnn_benchmark_is_set_after_the_device_line_once():
    forms = speededits.cudnn_benchmark(LOADER, 4)
    assert isinstance(forms, list)
    lines = forms[0].data.decode().splitlines()
    assert lines[3].startswith("device = torch.device(") and lines[4] == "torch.backends.cudnn.benchmark = True"
    assert forms[0].line == 5
    assert isinstance(speededits.cudnn_benchmark(forms[0].data, 4), str)  # already set


def test_a_file_that_cannot_be_parsed_gets_no_edit():
    for outcome in (speededits.workers(b"def (:\n", 1), speededits.pinned(b"def (:\n", [1], 1),
                    speededits.on_device(b"def (:\n", 1), speededits.sum_on_device(b"def (:\n", 1),
                    speededits.cudnn_benchmark(b"def (:\n", 1)):
        assert outcome == "the file cannot be parsed"


def test_a_tensor_copied_in_slices_is_moved_once_before_the_outermost_loop():
    code = src("""
        import torch
        x_all = torch.randn(640, 8)
        # two epochs
        for epoch in range(2):
            for i in range(0, 640, 64):
                x = x_all[i : i + 64].to(device)
    """)
    forms = speededits.move_once(code, 6)
    assert isinstance(forms, list)
    text = forms[0].data.decode()
    assert text.replace("x_all = x_all.to(device)\n", "") == code.decode()
    assert text.index("# two epochs") < text.index("x_all = x_all.to(device)") < text.index("for epoch")
    assert forms[0].line == 4 and forms[0].edit == "x_all = x_all.to(device)"
    rebound = code.replace(b"x = x_all[i : i + 64]", b"x_all = x_all * 2\n        x = x_all[i : i + 64]")
    why = speededits.move_once(rebound, 7)
    assert isinstance(why, str) and "bound again inside the loop" in why
    unbound = src("""
        def step(x_all):
            for i in range(3):
                x = x_all[i].to(device)
    """)
    why = speededits.move_once(unbound, 3)
    assert isinstance(why, str) and "not bound before the loop" in why
    drawn = speededits.on_device(src("""
        for i in range(3):
            noise = (0.1 * torch.randn(4, generator=g)).to(device)
    """), 2)
    assert isinstance(drawn, str) and "torch.randn" in drawn and "changes the numbers" in drawn
