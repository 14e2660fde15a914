"""The live layer: the engine process and its pipes, the journal on disk, and the thin trio
supervisor that carries out what the core decides."""
