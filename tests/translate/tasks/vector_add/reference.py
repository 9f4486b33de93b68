def reference(inputs, dims):
    return {"c": inputs["a"] + inputs["b"]}
