"""The CEL environment policies compile in: the environment, its analyses and the Kubernetes libraries (pure)."""
