"""absl entry modules: one per experiment family."""
