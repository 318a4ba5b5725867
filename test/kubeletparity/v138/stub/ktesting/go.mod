module k8s.io/ktesting

go 1.27.0
