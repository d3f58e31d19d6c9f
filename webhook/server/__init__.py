"""The serving process: its settings, the wiring of every component, health and readiness."""
