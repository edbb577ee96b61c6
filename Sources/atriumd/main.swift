print("atriumd")
