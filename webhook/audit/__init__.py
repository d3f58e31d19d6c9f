"""Background audit: existing objects evaluated with the admission engine, and the PolicyReports built from it."""
