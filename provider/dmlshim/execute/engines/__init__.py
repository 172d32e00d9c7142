"""The engines a session runs on: partitioned (with its two paths, the whole-model check and the
partitioned steps), custom-op and cpu. May import every other part of ``execute``."""
