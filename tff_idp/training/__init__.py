"""IDP-FedAvg learning processes, the round driver and checkpointing."""
