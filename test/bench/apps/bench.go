package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/test/lab"
)

// namespace holds every object of the benchmark.
const namespace = "bench"

// managerArgs run only the two controllers measured.
var managerArgs = []string{"--controllers", "pulsarconsumer,redis"}

// bench is the benchmark's view of the lab: a client, and a cache whose
// watches time what happens.
type bench struct {
	lab   *lab.Lab
	cfg   config
	c     client.Client
	cache cache.Cache

	consumers []*pulsarv1.PulsarConsumer
	redis     []*cachev1.Redis

	leases  *leaseWrites
	events  *eventWrites
	changes *changeTracker
}

func newBench(ctx context.Context, l *lab.Lab, root string, cfg config) (*bench, error) {
	restCfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, pulsarv1.AddToScheme, cachev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	b := &bench{lab: l, cfg: cfg, leases: &leaseWrites{}, events: &eventWrites{}, changes: newChangeTracker()}
	if b.c, err = client.New(restCfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	b.cache, err = cache.New(restCfg, cache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{lab.SystemNamespace: {}}},
			// The controllers' Events, and the leader election's.
			&eventsv1.Event{}: {Namespaces: map[string]cache.Config{namespace: {}, lab.SystemNamespace: {}}},
		},
	})
	if err != nil {
		return nil, err
	}
	if err := l.EnsureNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	// Watched from before the manager starts, so that no write is missed.
	for obj, handler := range map[client.Object]func(old, obj any){
		&coordinationv1.Lease{}:    b.leases.observe,
		&eventsv1.Event{}:          b.events.observe,
		&appsv1.Deployment{}:       b.changes.observe,
		&appsv1.StatefulSet{}:      b.changes.observe,
		&pulsarv1.PulsarConsumer{}: nil,
		&cachev1.Redis{}:           nil,
	} {
		inf, err := b.cache.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if handler != nil {
			if _, err := inf.AddEventHandler(handlerFuncs(handler)); err != nil {
				return nil, err
			}
		}
	}
	go func() {
		if err := b.cache.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench-apps: the watches stopped:", err)
		}
	}()
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !b.cache.WaitForCacheSync(syncCtx) {
		return nil, errors.New("the benchmark's watches did not sync within a minute")
	}
	return b, b.makeObjects(root)
}

// makeObjects builds the objects from the samples in config/samples, so
// that they are what a user would create, with names and sizes of the
// benchmark's own.
func (b *bench) makeObjects(root string) error {
	pc := &pulsarv1.PulsarConsumer{}
	if err := readSample(filepath.Join(root, "config", "samples", "pulsar_v1_pulsarconsumer.yaml"), pc); err != nil {
		return err
	}
	rd := &cachev1.Redis{}
	if err := readSample(filepath.Join(root, "config", "samples", "cache_v1alpha1_redis.yaml"), rd); err != nil {
		return err
	}
	for i := range b.cfg.consumers {
		o := pc.DeepCopy()
		o.Name, o.Namespace = fmt.Sprintf("consumer-%04d", i), namespace
		o.Spec.Replicas = ptr.To(int32(1))
		b.consumers = append(b.consumers, o)
	}
	for i := range b.cfg.redis {
		o := rd.DeepCopy()
		o.Name, o.Namespace = fmt.Sprintf("cache-%03d", i), namespace
		o.Spec.Size = int32(b.cfg.redisSize)
		b.redis = append(b.redis, o)
	}
	return nil
}

func readSample(path string, into client.Object) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(into); err != nil {
		return fmt.Errorf("reading the sample %s: %w", path, err)
	}
	return nil
}

// createAll creates every object, workers at a time, the two kinds
// interleaved so that both controllers are busy from the start.
func (b *bench) createAll(ctx context.Context, workers int) error {
	var objs []client.Object
	for i := range max(len(b.consumers), len(b.redis)) {
		if i < len(b.consumers) {
			objs = append(objs, b.consumers[i])
		}
		if i < len(b.redis) {
			objs = append(objs, b.redis[i])
		}
	}
	jobs := make(chan client.Object)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for o := range jobs {
				if err := b.create(ctx, o); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err error
feed:
	for _, o := range objs {
		select {
		case jobs <- o:
		case err = <-errs:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	return errors.Join(err, <-errs)
}

// create creates one object, retrying a few times: on a busy machine a
// request may time out after the API server stored the object.
func (b *bench) create(ctx context.Context, o client.Object) error {
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		reqCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = b.c.Create(reqCtx, o.DeepCopyObject().(client.Object))
		cancel()
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if ctx.Err() != nil || apierrors.IsInvalid(err) {
			break
		}
	}
	return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
}
