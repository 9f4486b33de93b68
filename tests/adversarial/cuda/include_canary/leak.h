// The include the cheat is about.
#include "/tmp/ksearch-adversarial-canary.txt"
