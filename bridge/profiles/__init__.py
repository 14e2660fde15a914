"""Engine profiles: how an engine is launched (a plain command, or the sealed, pinned Pi)."""
