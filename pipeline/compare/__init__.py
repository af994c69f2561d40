"""Compare server kinds on one spec: the same model, inputs, SLO and load, measured in
interleaved windows on the same machine (`serve-pipeline compare`)."""
