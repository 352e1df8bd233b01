"""The pipeline file and its plan: config, validation, checkpoint, lock."""
