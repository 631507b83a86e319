"""Engine: image backends, launchers, server handles, readiness and the process registry; one arm launch."""
