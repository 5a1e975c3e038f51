"""What runs inside a worker, behind Faust's public interfaces."""
