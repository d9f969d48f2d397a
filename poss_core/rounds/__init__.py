"""What a decoding round is and what is said of it: `RoundEvent`, the statistics over rounds (the one place they are
computed), a round's account in words and a run's token records."""
