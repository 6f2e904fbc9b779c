"""Record-level accounting (rPDP-FL): two-stage RDP (Thm 1), the SCF
estimator, calibration, BinarySearch, record plans and the record ledger. No TensorFlow.
"""
