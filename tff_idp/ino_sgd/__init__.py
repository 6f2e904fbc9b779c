"""INO-SGD (paper: ino-sgd-*.md): importance rho, the TIF filter and the
federated weight hook that plugs into rPDP-FL's local DP-SGD step.
"""
