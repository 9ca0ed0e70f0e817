"""The model repository: Triton's layout on disk, config.pbtxt parsing, versions and lifecycle."""
