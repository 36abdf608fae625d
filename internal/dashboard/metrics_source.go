package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// MetricsSource is one place the Sampler reads the sink runners' metrics
// from: a registry in the same process (Registry) or the /metrics endpoint
// of a sinks process (Scrape).
type MetricsSource interface {
	// Gather returns the metric families. With an error it may still
	// return what it could read.
	Gather(ctx context.Context) ([]*dto.MetricFamily, error)
	// Name names the source on the page and in logs.
	Name() string
}

// Registry returns a MetricsSource reading g, a registry the sink runners
// of this process register on (`fairway demo`).
func Registry(name string, g prometheus.Gatherer) MetricsSource {
	return registrySource{name: name, g: g}
}

type registrySource struct {
	name string
	g    prometheus.Gatherer
}

func (r registrySource) Name() string { return r.name }

func (r registrySource) Gather(context.Context) ([]*dto.MetricFamily, error) { return r.g.Gather() }

// scrapeBodyMax bounds what one scrape reads: a sinks process exports a
// few hundred series.
const scrapeBodyMax = 16 << 20

// Scrape returns a MetricsSource that GETs the Prometheus text exposition
// at rawURL with client (http.DefaultClient when nil; the Sampler bounds
// each scrape by its Timeout). rawURL is a sinks process's /metrics URL;
// "host:port" alone means http://host:port/metrics. ErrConfig when it is
// neither.
func Scrape(rawURL string, client *http.Client) (MetricsSource, error) {
	u, err := MetricsURL(rawURL)
	if err != nil {
		return nil, err
	}
	if client == nil {
		client = http.DefaultClient
	}
	return &scrapeSource{url: u, client: client}, nil
}

// MetricsURL normalizes a sinks /metrics address: "host:port" becomes
// http://host:port/metrics, a URL without a path gets /metrics. It returns
// ErrConfig for anything else than an http(s) URL with a host.
func MetricsURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", fmt.Errorf("%w: empty metrics URL", ErrConfig)
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: metrics URL %q: %v", ErrConfig, raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%w: metrics URL %q: want http or https", ErrConfig, raw)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("%w: metrics URL %q has no host", ErrConfig, raw)
	case u.User != nil:
		return "", fmt.Errorf("%w: metrics URL %q: credentials in the URL are not supported", ErrConfig, raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return u.String(), nil
}

type scrapeSource struct {
	url    string
	client *http.Client
}

func (s *scrapeSource) Name() string { return s.url }

func (s *scrapeSource) Gather(ctx context.Context) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	res, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.url, res.Status)
	}
	dec := expfmt.NewDecoder(io.LimitReader(res.Body, scrapeBodyMax), expfmt.ResponseFormat(res.Header))
	var out []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("read %s: %w", s.url, err)
		}
		out = append(out, mf)
	}
}
