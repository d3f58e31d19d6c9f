"""AdmissionReview wire types, parsing and response constructors (pure; no I/O)."""
