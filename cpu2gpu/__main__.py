try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the modules load: quiet, as a shell expects
    raise SystemExit(130) from None

main()
