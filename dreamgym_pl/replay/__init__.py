"""Replay retrieval: embedders and the hnswlib-backed transition buffer."""
