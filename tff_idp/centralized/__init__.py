"""One-silo trainers: Filter-GD and the centralized DP-SGD / INO-SGD loop."""
