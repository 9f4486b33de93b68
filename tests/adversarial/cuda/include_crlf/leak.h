// The include the cheat is about, split over CR LF.
#inc\
lude "/tmp/ksearch-adversarial-canary.txt"
