"""The NPT model: plan, eigensolvers, landmarks, the model, projection, growth, pre-images."""
