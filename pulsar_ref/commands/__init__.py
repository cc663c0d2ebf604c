"""One module per `pulsar-ref` subcommand; each exposes `main(argv, prog) -> int`."""
