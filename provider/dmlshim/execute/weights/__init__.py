"""Where a session's model and weights come from: the model read once, weights read where they lie in
its files, the session's own copy of inline weights, and initializers the caller adds. Imports ``proofs``
and nothing else in ``execute``."""
