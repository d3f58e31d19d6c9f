"""Application wiring: informers, policy index, admission server, TLS; every background task in cleanup_ctx."""
