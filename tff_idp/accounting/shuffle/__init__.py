"""TF-free privacy accounting for APES / S-APES (shuffled personalized LDP)."""
