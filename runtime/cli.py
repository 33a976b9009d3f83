"""``cpu2gpu verify``: the click command. torch is imported only when it runs."""

from __future__ import annotations

import click

INSTALL_HINT = "cpu2gpu verify needs PyTorch: pip install 'cpu2gpu[runtime]'"
# The verdict's exit code. "needs-data": a run stopped on data that is not here
# (--synthetic-data), so the migration could not be judged: neither pass nor fail.
EXIT_CODES = {"pass": 0, "fail": 1, "error": 2, "needs-data": 3}


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
              help="Cap the training at N optimizer steps and let the code after the training run (evaluation, "
                   ".numpy(), saving): DataLoader passes then end after one batch, evaluation passes get "
                   "a few, later steps do nothing. A loop not over a DataLoader ends the run at step N, "
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
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option("--progress", "force_progress", is_flag=True,
              help="Progress lines on stderr even when it is not a terminal (logs, CI).")
def verify(script, script_args, against, device, max_steps, timeout, seed, rtol, nproc, jobs, output_format,
           show_output, keep_workdirs, synthetic_data, clean_env, env_allow, report_path, quiet, force_progress):
    """Run SCRIPT under instrumentation and show that it trains on the device,
    falls back to the CPU, and (with --against) learns the same as the original.

    Arguments after SCRIPT that are not verify's own options are passed to it
    (and to the original); put them after "--" when their names clash.
    Exit codes: 0 pass, 1 fail, 2 error, 3 needs data (--synthetic-data).
    """
    if env_allow and not clean_env:
        click.echo("cpu2gpu verify: --env-allow needs --clean-env (without it every variable is passed)", err=True)
        raise SystemExit(2)
    try:
        import torch  # noqa: F401
    except ImportError:
        click.echo(INSTALL_HINT, err=True)
        raise SystemExit(2)

    import sys

    from . import progressview
    from .report import to_json, to_text
    from .verify import VerifyError, verify as run_verify

    view = progressview.choose(sys.stderr, quiet=quiet, force=force_progress, show_output=show_output)
    try:
        report = run_verify(script, script_args, against=against, device=device, max_steps=max_steps,
                            seed=seed, timeout=timeout, jobs=jobs, rtol=rtol, keep=keep_workdirs,
                            show_output=show_output, synthetic_data=synthetic_data, clean_env=clean_env,
                            env_allow=env_allow, progress=view, nproc=nproc)
    except VerifyError as e:
        click.echo(f"cpu2gpu verify: {e}", err=True)
        raise SystemExit(2)
    click.echo(to_json(report) if output_format == "json" else to_text(report))
    if report_path:
        from .htmlreport import to_html

        try:
            with open(report_path, "w", encoding="utf-8") as f:
                f.write(to_html(report))
        except OSError as e:
            click.echo(f"cpu2gpu verify: cannot write the report: {e}", err=True)
            raise SystemExit(2)
    raise SystemExit(EXIT_CODES.get(report["verdict"], 2))
