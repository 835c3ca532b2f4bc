package main

import (
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
)

// controller is one entry of --controllers: the API types it needs in the
// scheme and the function that registers it with the manager.
type controller struct {
	name        string
	addToScheme func(*runtime.Scheme) error
	setup       func(ctrl.Manager) error
}

// controllers lists every controller the manager can run, in start order.
// Each operator adds its entry here.
var controllers = []controller{}
