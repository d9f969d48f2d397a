"""The comparison runtime: the methods (plain, EAGLE, POSS-n, PLD, ...), the models kept loaded, a run's checked
settings, the race of lanes in time, the call's time cap, held memory and saved runs."""
