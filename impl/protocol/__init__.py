"""Pulsar's binary protocol, shared by the broker, the proxy and the project's client: frames
(frames.py), the generated messages (pulsar_api_pb2), the entry format (entry_codec.py), message ids
(message_id.py) and batch-index ack sets (bitset.py). It imports neither the broker nor a client."""
