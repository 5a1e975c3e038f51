"""streamapp's Faust stream (the App's ``Stream`` setting): an agent's records taken a run at a
time and given one at a time (`stream`), and a batch agent's current event (`batch_stream`)."""
