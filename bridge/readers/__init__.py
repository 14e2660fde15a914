"""Readers of transcripts and journals: replay, conform and diagnose."""
