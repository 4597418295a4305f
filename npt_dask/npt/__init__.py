"""The NPT model: its parameters, plan, eigensolvers, the model, projection, growth,
pre-images."""
