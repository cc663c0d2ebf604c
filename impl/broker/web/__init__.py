"""The broker's web service: Pulsar's admin REST API v2, HTTP lookup, /metrics and the cluster view."""

# The routes are in routes.py, not here: `pulsar-ref admin` imports admin_client from this package, and
# an import of the package must not load the whole broker (about 0.5 s a command).
