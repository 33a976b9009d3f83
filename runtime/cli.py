"""``cpu2gpu verify``: the click command. torch is imported only when it runs."""

from __future__ import annotations

import sys

import click

INSTALL_HINT = "cpu2gpu verify needs PyTorch: pip install 'cpu2gpu[runtime]'"
# The verdict's exit code. "needs-data": a run stopped on data that is not here (a download
# that failed; with --synthetic-data, a missing file too), so the migration could not be judged:
# neither pass nor fail. "error" also covers a package the script imports that is not installed.
EXIT_CODES = {"pass": 0, "fail": 1, "unproven": 1, "error": 2, "needs-data": 3}


@click.command(
    "verify",
    # verify's own options go anywhere; others pass through to the script
    # (after "--", everything does: `verify train.py -- --seed 1`).
    context_settings={"ignore_unknown_options": True},
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--against", "against", type=click.Path(dir_okay=False), default=None,
              help="The original script: run on the CPU with the same seeds, and compare the losses.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu", "sim", "sim-mps", "mps", "xpu"]), default="auto", show_default=True,
              help="cuda: the GPU; cpu: CUDA hidden (the fallback); sim: a simulated CUDA device on the CPU; "
                   "sim-mps: a simulated Apple GPU (mps:0, refuses float64); mps, xpu: the Apple or Intel GPU; "
                   "auto: cuda if there is a GPU, else sim, and the cpu fallback too.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None,
              help="Cap the training at N training steps (optimizer steps or updates by hand) and let the code after the training run (evaluation, "
                   ".numpy(), saving): DataLoader passes then end after one batch, evaluation passes get "
                   "a few, later steps do nothing; any other for loop that steps ends after the cap. A while loop that trains ends the run at step N, "
                   "as does training that goes on long after the cap.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True,
              help="Seconds before a run is stopped.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for torch, random and numpy, the same in every run.")
@click.option("--rtol", type=click.FloatRange(min=0.0), default=None,
              help="Tolerance of the step-by-step loss comparison: |a-b| <= rtol*max(|a|,|b|) + atol, "
                   "atol = rtol times the original's mean |loss| [default: 1e-5 for cpu and sim, 2e-2 for cuda]; "
                   "with --nproc, the tolerance of the loss trend [default: 0.25].")
@click.option("--nproc", type=click.IntRange(min=2), default=None, metavar="N",
              help="SCRIPT is a DistributedDataParallel script for torchrun: run it with N ranks "
                   "(torch.distributed.run --standalone; on the CPU with gloo) and show that every rank "
                   "trains, that the ranks' parameters stay equal after each step, and (with --against) that "
                   "the mean loss over the ranks follows the single-process original's trend "
                   "(--rtol then sets that tolerance, default 0.25).")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Runs at a time [default: half the CPU cores, at least 1].")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--show-output", is_flag=True, help="Print each run's own output (stdout, stderr).")
@click.option("--keep-workdirs", is_flag=True, help="Keep each run's temporary copy of the script's folder.")
@click.option("--synthetic-data", is_flag=True,
              help="Replace the data sets verify knows (torchvision, Hugging Face, torchaudio, sklearn fetch_*) "
                   "by small deterministic stand-ins, the same in every run; a file the script reads that is "
                   "not here gives the verdict needs-data (exit 3).")
@click.option("--clean-env", is_flag=True,
              help="Start each run with a minimal environment (PATH, locale, CUDA and library paths; HOME and "
                   "TMPDIR inside the run's folder) instead of this one's.")
@click.option("--env-allow", "env_allow", multiple=True, metavar="NAME",
              help="With --clean-env, also pass this variable (a pattern: WANDB_*); repeatable.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write the report as one self-contained HTML file: loss curves, step times, "
                   "device audit, verdict.")
@click.option("--speed", is_flag=True,
              help="Also count, in the device run, what would keep a GPU idle per training step (host syncs and "
                   "their lines, copies to the device, kernels, allocations, the wait for batches), estimate the "
                   "step on a GPU (--gpu) and rank the causes with their lines and fixes: the report's speed section.")
@click.option("--gpu", "gpu", default=None, metavar="NAME",
              help="The GPU --speed estimates for (implies --speed): H100 (the default), A100, L4, RTX4090 or T4.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option("--progress", "force_progress", is_flag=True,
              help="Progress lines on stderr even when it is not a terminal (logs, CI).")
def verify(script, script_args, against, device, max_steps, timeout, seed, rtol, nproc, jobs, output_format,
           show_output, keep_workdirs, synthetic_data, clean_env, env_allow, report_path, speed, gpu, quiet,
           force_progress):
    """Run SCRIPT under instrumentation and show that it trains on the device,
    falls back to the CPU, and (with --against) learns the same as the original.

    Arguments after SCRIPT that are not verify's own options are passed to it
    (and to the original); put them after "--" when their names clash.
    Exit codes: 0 pass, 1 fail, 2 error (also a package the script imports is not installed),
    3 needs data (a download that failed; with --synthetic-data, a missing file).
    """
    if env_allow and not clean_env:
        click.echo("cpu2gpu verify: --env-allow needs --clean-env (without it every variable is passed)", err=True)
        raise SystemExit(2)
    try:
        # only when verify runs, to say torch is missing: `cpu2gpu --help` loads this module and needs no torch
        import torch  # noqa: F401
    except ImportError:
        click.echo(INSTALL_HINT, err=True)
        raise SystemExit(2)

    # verify's modules load only when it runs (start-up time: `cpu2gpu --help` and `verify --help` load this module)
    from .report import progressview
    from .sandbox.reaper import guard
    from .report.report import to_json, to_text
    from .judge.verify import VerifyError, verify as run_verify

    view = progressview.choose(sys.stderr, quiet=quiet, force=force_progress, show_output=show_output)
    try:
        with guard():  # Ctrl-C, SIGTERM, SIGHUP, an exception: no process of the runs lives on
            report = run_verify(script, script_args, against=against, device=device, max_steps=max_steps,
                                seed=seed, timeout=timeout, jobs=jobs, rtol=rtol, keep=keep_workdirs,
                                show_output=show_output, synthetic_data=synthetic_data, clean_env=clean_env,
                                env_allow=env_allow, progress=view, nproc=nproc, speed=speed or gpu is not None,
                                gpu=gpu)
    except VerifyError as e:
        click.echo(f"cpu2gpu verify: {e}", err=True)
        raise SystemExit(2)
    click.echo(to_json(report) if output_format == "json" else to_text(report))
    if report_path:
        from .report.htmlreport import to_html  # only for --report (start-up time)

        try:
            with open(report_path, "w", encoding="utf-8") as f:
                f.write(to_html(report))
        except OSError as e:
            click.echo(f"cpu2gpu verify: cannot write the report: {e}", err=True)
            raise SystemExit(2)
    raise SystemExit(EXIT_CODES.get(report["verdict"], 2))


@click.command("migrate", context_settings={"ignore_unknown_options": True})
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--in-place", is_flag=True,
              help="Write the migrated files (only when the final verify passed, unless --write-unproven).")
@click.option("--write-unproven", is_flag=True, help="With --in-place, write the files even when not proven.")
@click.option("--device", type=click.Choice(["auto", "cuda", "sim", "sim-mps"]), default="auto", show_default=True,
              help="Where the draft runs (auto: cuda if there is a GPU, else sim); the CPU fallback always runs too.")
@click.option("--max-steps", type=click.IntRange(min=1), default=5, show_default=True,
              help="Cap each run at N optimizer steps (as verify --max-steps).")
@click.option("--max-rounds", type=click.IntRange(min=0), default=8, show_default=True,
              help="Repair rounds after the static rewrite.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True,
              help="Seconds before a run is stopped.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--rtol", type=click.FloatRange(min=0.0), default=None, help="As verify --rtol.")
@click.option("--synthetic-data", is_flag=True, help="Stand-in data sets, as verify --synthetic-data.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--report", "report_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also write the final round's verify report as one HTML file.")
@click.option("--speed", is_flag=True,
              help="Once proven, also make the edits that remove what would keep a GPU idle (verify --speed's "
                   "causes: DataLoader workers, pinned batches copied with non_blocking, tensors made on the "
                   "device, running sums kept on the device, cudnn.benchmark), each kept only where verify "
                   "gives the same losses and a shorter estimated step.")
@click.option("--gpu", "gpu", default=None, metavar="NAME",
              help="The GPU --speed estimates for (implies --speed): H100 (the default), A100, L4, RTX4090 or T4.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
def migrate(script, script_args, in_place, write_unproven, device, max_steps, max_rounds, timeout, seed, rtol,
            synthetic_data, output_format, report_path, speed, gpu, quiet):
    """Migrate SCRIPT (and the project files it imports) to the GPU and prove it: the static rewrite,
    then runs on the (simulated) GPU whose located failures become moves where the values are bound,
    until verify passes against the original. Without --in-place, prints the diff and writes nothing.

    Exit codes: 0 proven, 1 not proven, 2 error, 3 cannot be judged here (the original fails, data or
    a package is missing).
    """
    try:
        # only when migrate runs, to say torch is missing: `cpu2gpu --help` loads this module and needs no torch
        import torch  # noqa: F401
    except ImportError:
        click.echo(INSTALL_HINT.replace("verify", "migrate"), err=True)
        raise SystemExit(2)

    # migrate's modules and the static engine load only when it runs (start-up: `cpu2gpu --help` loads this module)
    from .judge.migrate import EXIT_CANNOT_RUN, EXIT_ERROR, EXIT_PROVEN, EXIT_UNPROVEN, migrate as run_migrate
    from .report.migratereport import to_json, to_text, write_files
    from .sandbox.reaper import guard
    from .judge.verify import VerifyError

    say = None if quiet or not sys.stderr.isatty() else (lambda line: click.echo(line, err=True))
    try:
        with guard():  # Ctrl-C, SIGTERM, SIGHUP, an exception: no process of the runs lives on
            result = run_migrate(script, script_args, device=device, max_steps=max_steps, synthetic_data=synthetic_data,
                                 timeout=timeout, seed=seed, rtol=rtol, max_rounds=max_rounds, progress=say,
                                 speed=speed or gpu is not None, gpu=gpu)
    except VerifyError as e:
        click.echo(f"cpu2gpu migrate: {e}", err=True)
        raise SystemExit(EXIT_ERROR)
    written, errors = [], []
    if in_place and (result["proven"] or write_unproven):
        written, errors = write_files(result)
    result["written"] = written
    click.echo(to_json(result) if output_format == "json" else to_text(result, diff=not in_place))
    for error in errors:
        click.echo(f"error: {error}", err=True)
    if report_path:
        from .report.htmlreport import to_html  # only for --report (start-up time)

        try:
            with open(report_path, "w", encoding="utf-8") as f:
                f.write(to_html(result["verify"], result.get("speed")))
        except OSError as e:
            click.echo(f"cpu2gpu migrate: cannot write the report: {e}", err=True)
            raise SystemExit(EXIT_ERROR)
    if errors:
        raise SystemExit(EXIT_ERROR)
    if result["cannot_run"]:
        raise SystemExit(EXIT_CANNOT_RUN)
    raise SystemExit(EXIT_PROVEN if result["proven"] else EXIT_UNPROVEN)
