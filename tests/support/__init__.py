"""Helpers shared by the test folders: no tests here.

cli (the CLI as a process, run records), specs (fast spec variants), moto_s3 (an S3 server),
processes (servers left running), http_server (a loopback HTTP server in a thread), policy (a
store with an approval policy), htmldom (HTML checks), faultproxy (S3 faults on the
wire), crash_driver (a store writer to kill), refusals and bad_models (deliberately bad
releases), docker_images (registry and CPU base image for the Docker tests).
"""
