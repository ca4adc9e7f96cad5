"""One module per CLI command (group); each exposes `command`, registered in imagebuild/cli.py."""
