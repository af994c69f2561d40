"""Model servers: render their configs, start them, watch them."""
