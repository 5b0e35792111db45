"""The Talos server: FastAPI application, partition ownership, group commit, fetch (see ARCHITECTURE.md)."""
