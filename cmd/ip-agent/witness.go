package main

import "time"

// witnessBackstop is how long after a witness hold the coarse address
// lifetimes may run: the gate silences the node at the hold's end; the
// lifetimes only make sure a killed agent's addresses go eventually, and
// must leave a whole second to write. The protocol's start-up and run are
// internal/witnessrun, shared with the scale bench's light agents.
const witnessBackstop = 1500 * time.Millisecond
