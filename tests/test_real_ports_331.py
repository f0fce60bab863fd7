# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
raw-waveform speech models whose filters are built in torch.

- SincNet as mravanelli/SincNet writes it: ``dnn_models.py`` whole (``flip`` by
  ``getattr(torch.arange(...), ('cpu','cuda')[x.is_cuda])()``; ``sinc`` and the first
  ``sinc_conv``, whose filters are written row by row into a ``torch.zeros`` under the graph
  from ``float64`` parameters ``.float()``-cast; ``SincConv_fast``, whose band-pass filters
  come from ``torch.matmul`` of the cut-off frequencies and the time axis, ``torch.clamp``,
  ``torch.flip(..., dims=[1])`` and ``torch.cat``; the ``LayerNorm`` of an unbiased ``std``
  over a ``[N_filt, length]`` shape; ``BatchNorm1d(N_filt, int(...), momentum=0.05)`` whose
  second positional argument is ``eps``; ``MLP`` with ``torch.nn.Parameter(torch.Tensor(n,
  m).uniform_(...))`` weights set on ``nn.Linear`` and ``LogSoftmax``), and ``speaker_id.py``
  from ``create_batches_rnd`` on (NumPy draws of sentences, chunks and amplitudes, a
  ``soundfile`` stand-in reading in-memory waves), the three ``RMSprop(alpha=0.95, eps=1e-8)``
  optimizers, two epochs of two batches with ``NLLLoss``, and the chunked validation under
  ``torch.no_grad()`` (``sig_arr[count_fr,:]=signal[...]`` writes, ``pout[a:b,:]=...`` in
  place, ``torch.max(torch.sum(pout,dim=0),0)`` unpacked, ``torch.save`` of the three state
  dicts); the test adds a differentiated call of ``sinc_conv``.

Changed for the test: the scale (``fs=8000``, 25 ms chunks, filters of 31 taps, ``Batch_dev``
4), ``read_conf`` and ``ReadList`` replaced by the values they would read, the ``.cuda()``
calls removed (both runs are on the CPU), trailing blanks stripped, and the import and
gradient lines; the weights of torch's run are loaded into the port's.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

SINCNET_SOURCE = r'''
import numpy as np
import torch
import torch.nn.functional as F
import torch.nn as nn
import sys
from torch.autograd import Variable
import math

def flip(x, dim):
    xsize = x.size()
    dim = x.dim() + dim if dim < 0 else dim
    x = x.contiguous()
    x = x.view(-1, *xsize[dim:])
    x = x.view(x.size(0), x.size(1), -1)[:, getattr(torch.arange(x.size(1)-1,
                      -1, -1), ('cpu','cuda')[x.is_cuda])().long(), :]
    return x.view(xsize)


def sinc(band,t_right):
    y_right= torch.sin(2*math.pi*band*t_right)/(2*math.pi*band*t_right)
    y_left= flip(y_right,0)

    y=torch.cat([y_left,Variable(torch.ones(1)),y_right])

    return y


class SincConv_fast(nn.Module):
    """Sinc-based convolution
    Parameters
    ----------
    in_channels : `int`
        Number of input channels. Must be 1.
    out_channels : `int`
        Number of filters.
    kernel_size : `int`
        Filter length.
    sample_rate : `int`, optional
        Sample rate. Defaults to 16000.
    Usage
    -----
    See `torch.nn.Conv1d`
    Reference
    ---------
    Mirco Ravanelli, Yoshua Bengio,
    "Speaker Recognition from raw waveform with SincNet".
    https://arxiv.org/abs/1808.00158
    """

    @staticmethod
    def to_mel(hz):
        return 2595 * np.log10(1 + hz / 700)

    @staticmethod
    def to_hz(mel):
        return 700 * (10 ** (mel / 2595) - 1)

    def __init__(self, out_channels, kernel_size, sample_rate=16000, in_channels=1,
                 stride=1, padding=0, dilation=1, bias=False, groups=1, min_low_hz=50, min_band_hz=50):

        super(SincConv_fast,self).__init__()

        if in_channels != 1:
            #msg = (f'SincConv only support one input channel '
            #       f'(here, in_channels = {in_channels:d}).')
            msg = "SincConv only support one input channel (here, in_channels = {%i})" % (in_channels)
            raise ValueError(msg)

        self.out_channels = out_channels
        self.kernel_size = kernel_size

        # Forcing the filters to be odd (i.e, perfectly symmetrics)
        if kernel_size%2==0:
            self.kernel_size=self.kernel_size+1

        self.stride = stride
        self.padding = padding
        self.dilation = dilation

        if bias:
            raise ValueError('SincConv does not support bias.')
        if groups > 1:
            raise ValueError('SincConv does not support groups.')

        self.sample_rate = sample_rate
        self.min_low_hz = min_low_hz
        self.min_band_hz = min_band_hz

        # initialize filterbanks such that they are equally spaced in Mel scale
        low_hz = 30
        high_hz = self.sample_rate / 2 - (self.min_low_hz + self.min_band_hz)

        mel = np.linspace(self.to_mel(low_hz),
                          self.to_mel(high_hz),
                          self.out_channels + 1)
        hz = self.to_hz(mel)


        # filter lower frequency (out_channels, 1)
        self.low_hz_ = nn.Parameter(torch.Tensor(hz[:-1]).view(-1, 1))

        # filter frequency band (out_channels, 1)
        self.band_hz_ = nn.Parameter(torch.Tensor(np.diff(hz)).view(-1, 1))

        # Hamming window
        #self.window_ = torch.hamming_window(self.kernel_size)
        n_lin=torch.linspace(0, (self.kernel_size/2)-1, steps=int((self.kernel_size/2))) # computing only half of the window
        self.window_=0.54-0.46*torch.cos(2*math.pi*n_lin/self.kernel_size);


        # (1, kernel_size/2)
        n = (self.kernel_size - 1) / 2.0
        self.n_ = 2*math.pi*torch.arange(-n, 0).view(1, -1) / self.sample_rate # Due to symmetry, I only need half of the time axes




    def forward(self, waveforms):
        """
        Parameters
        ----------
        waveforms : `torch.Tensor` (batch_size, 1, n_samples)
            Batch of waveforms.
        Returns
        -------
        features : `torch.Tensor` (batch_size, out_channels, n_samples_out)
            Batch of sinc filters activations.
        """

        self.n_ = self.n_.to(waveforms.device)

        self.window_ = self.window_.to(waveforms.device)

        low = self.min_low_hz  + torch.abs(self.low_hz_)

        high = torch.clamp(low + self.min_band_hz + torch.abs(self.band_hz_),self.min_low_hz,self.sample_rate/2)
        band=(high-low)[:,0]

        f_times_t_low = torch.matmul(low, self.n_)
        f_times_t_high = torch.matmul(high, self.n_)

        band_pass_left=((torch.sin(f_times_t_high)-torch.sin(f_times_t_low))/(self.n_/2))*self.window_ # Equivalent of Eq.4 of the reference paper (SPEAKER RECOGNITION FROM RAW WAVEFORM WITH SINCNET). I just have expanded the sinc and simplified the terms. This way I avoid several useless computations.
        band_pass_center = 2*band.view(-1,1)
        band_pass_right= torch.flip(band_pass_left,dims=[1])


        band_pass=torch.cat([band_pass_left,band_pass_center,band_pass_right],dim=1)


        band_pass = band_pass / (2*band[:,None])


        self.filters = (band_pass).view(
            self.out_channels, 1, self.kernel_size)

        return F.conv1d(waveforms, self.filters, stride=self.stride,
                        padding=self.padding, dilation=self.dilation,
                         bias=None, groups=1)




class sinc_conv(nn.Module):

    def __init__(self, N_filt,Filt_dim,fs):
        super(sinc_conv,self).__init__()

        # Mel Initialization of the filterbanks
        low_freq_mel = 80
        high_freq_mel = (2595 * np.log10(1 + (fs / 2) / 700))  # Convert Hz to Mel
        mel_points = np.linspace(low_freq_mel, high_freq_mel, N_filt)  # Equally spaced in Mel scale
        f_cos = (700 * (10**(mel_points / 2595) - 1)) # Convert Mel to Hz
        b1=np.roll(f_cos,1)
        b2=np.roll(f_cos,-1)
        b1[0]=30
        b2[-1]=(fs/2)-100

        self.freq_scale=fs*1.0
        self.filt_b1 = nn.Parameter(torch.from_numpy(b1/self.freq_scale))
        self.filt_band = nn.Parameter(torch.from_numpy((b2-b1)/self.freq_scale))


        self.N_filt=N_filt
        self.Filt_dim=Filt_dim
        self.fs=fs


    def forward(self, x):

        filters=Variable(torch.zeros((self.N_filt,self.Filt_dim)))
        N=self.Filt_dim
        t_right=Variable(torch.linspace(1, (N-1)/2, steps=int((N-1)/2))/self.fs)


        min_freq=50.0;
        min_band=50.0;

        filt_beg_freq=torch.abs(self.filt_b1)+min_freq/self.freq_scale
        filt_end_freq=filt_beg_freq+(torch.abs(self.filt_band)+min_band/self.freq_scale)

        n=torch.linspace(0, N, steps=N)

        # Filter window (hamming)
        window=0.54-0.46*torch.cos(2*math.pi*n/N);
        window=Variable(window.float())


        for i in range(self.N_filt):

            low_pass1 = 2*filt_beg_freq[i].float()*sinc(filt_beg_freq[i].float()*self.freq_scale,t_right)
            low_pass2 = 2*filt_end_freq[i].float()*sinc(filt_end_freq[i].float()*self.freq_scale,t_right)
            band_pass=(low_pass2-low_pass1)

            band_pass=band_pass/torch.max(band_pass)

            filters[i,:]=band_pass*window

        out=F.conv1d(x, filters.view(self.N_filt,1,self.Filt_dim))

        return out


def act_fun(act_type):

 if act_type=="relu":
    return nn.ReLU()

 if act_type=="tanh":
    return nn.Tanh()

 if act_type=="sigmoid":
    return nn.Sigmoid()

 if act_type=="leaky_relu":
    return nn.LeakyReLU(0.2)

 if act_type=="elu":
    return nn.ELU()

 if act_type=="softmax":
    return nn.LogSoftmax(dim=1)

 if act_type=="linear":
    return nn.LeakyReLU(1) # initializzed like this, but not used in forward!


class LayerNorm(nn.Module):

    def __init__(self, features, eps=1e-6):
        super(LayerNorm,self).__init__()
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.gamma * (x - mean) / (std + self.eps) + self.beta


class MLP(nn.Module):
    def __init__(self, options):
        super(MLP, self).__init__()

        self.input_dim=int(options['input_dim'])
        self.fc_lay=options['fc_lay']
        self.fc_drop=options['fc_drop']
        self.fc_use_batchnorm=options['fc_use_batchnorm']
        self.fc_use_laynorm=options['fc_use_laynorm']
        self.fc_use_laynorm_inp=options['fc_use_laynorm_inp']
        self.fc_use_batchnorm_inp=options['fc_use_batchnorm_inp']
        self.fc_act=options['fc_act']


        self.wx  = nn.ModuleList([])
        self.bn  = nn.ModuleList([])
        self.ln  = nn.ModuleList([])
        self.act = nn.ModuleList([])
        self.drop = nn.ModuleList([])



        # input layer normalization
        if self.fc_use_laynorm_inp:
           self.ln0=LayerNorm(self.input_dim)

        # input batch normalization
        if self.fc_use_batchnorm_inp:
           self.bn0=nn.BatchNorm1d([self.input_dim],momentum=0.05)


        self.N_fc_lay=len(self.fc_lay)

        current_input=self.input_dim

        # Initialization of hidden layers

        for i in range(self.N_fc_lay):

         # dropout
         self.drop.append(nn.Dropout(p=self.fc_drop[i]))

         # activation
         self.act.append(act_fun(self.fc_act[i]))


         add_bias=True

         # layer norm initialization
         self.ln.append(LayerNorm(self.fc_lay[i]))
         self.bn.append(nn.BatchNorm1d(self.fc_lay[i],momentum=0.05))

         if self.fc_use_laynorm[i] or self.fc_use_batchnorm[i]:
             add_bias=False


         # Linear operations
         self.wx.append(nn.Linear(current_input, self.fc_lay[i],bias=add_bias))

         # weight initialization
         self.wx[i].weight = torch.nn.Parameter(torch.Tensor(self.fc_lay[i],current_input).uniform_(-np.sqrt(0.01/(current_input+self.fc_lay[i])),np.sqrt(0.01/(current_input+self.fc_lay[i]))))
         self.wx[i].bias = torch.nn.Parameter(torch.zeros(self.fc_lay[i]))

         current_input=self.fc_lay[i]


    def forward(self, x):

      # Applying Layer/Batch Norm
      if bool(self.fc_use_laynorm_inp):
        x=self.ln0((x))

      if bool(self.fc_use_batchnorm_inp):
        x=self.bn0((x))

      for i in range(self.N_fc_lay):

        if self.fc_act[i]!='linear':

          if self.fc_use_laynorm[i]:
           x = self.drop[i](self.act[i](self.ln[i](self.wx[i](x))))

          if self.fc_use_batchnorm[i]:
           x = self.drop[i](self.act[i](self.bn[i](self.wx[i](x))))

          if self.fc_use_batchnorm[i]==False and self.fc_use_laynorm[i]==False:
           x = self.drop[i](self.act[i](self.wx[i](x)))

        else:
          if self.fc_use_laynorm[i]:
           x = self.drop[i](self.ln[i](self.wx[i](x)))

          if self.fc_use_batchnorm[i]:
           x = self.drop[i](self.bn[i](self.wx[i](x)))

          if self.fc_use_batchnorm[i]==False and self.fc_use_laynorm[i]==False:
           x = self.drop[i](self.wx[i](x))

      return x



class SincNet(nn.Module):

    def __init__(self,options):
       super(SincNet,self).__init__()

       self.cnn_N_filt=options['cnn_N_filt']
       self.cnn_len_filt=options['cnn_len_filt']
       self.cnn_max_pool_len=options['cnn_max_pool_len']


       self.cnn_act=options['cnn_act']
       self.cnn_drop=options['cnn_drop']

       self.cnn_use_laynorm=options['cnn_use_laynorm']
       self.cnn_use_batchnorm=options['cnn_use_batchnorm']
       self.cnn_use_laynorm_inp=options['cnn_use_laynorm_inp']
       self.cnn_use_batchnorm_inp=options['cnn_use_batchnorm_inp']

       self.input_dim=int(options['input_dim'])

       self.fs=options['fs']

       self.N_cnn_lay=len(options['cnn_N_filt'])
       self.conv  = nn.ModuleList([])
       self.bn  = nn.ModuleList([])
       self.ln  = nn.ModuleList([])
       self.act = nn.ModuleList([])
       self.drop = nn.ModuleList([])


       if self.cnn_use_laynorm_inp:
           self.ln0=LayerNorm(self.input_dim)

       if self.cnn_use_batchnorm_inp:
           self.bn0=nn.BatchNorm1d([self.input_dim],momentum=0.05)

       current_input=self.input_dim

       for i in range(self.N_cnn_lay):

         N_filt=int(self.cnn_N_filt[i])
         len_filt=int(self.cnn_len_filt[i])

         # dropout
         self.drop.append(nn.Dropout(p=self.cnn_drop[i]))

         # activation
         self.act.append(act_fun(self.cnn_act[i]))

         # layer norm initialization
         self.ln.append(LayerNorm([N_filt,int((current_input-self.cnn_len_filt[i]+1)/self.cnn_max_pool_len[i])]))

         self.bn.append(nn.BatchNorm1d(N_filt,int((current_input-self.cnn_len_filt[i]+1)/self.cnn_max_pool_len[i]),momentum=0.05))


         if i==0:
          self.conv.append(SincConv_fast(self.cnn_N_filt[0],self.cnn_len_filt[0],self.fs))

         else:
          self.conv.append(nn.Conv1d(self.cnn_N_filt[i-1], self.cnn_N_filt[i], self.cnn_len_filt[i]))

         current_input=int((current_input-self.cnn_len_filt[i]+1)/self.cnn_max_pool_len[i])


       self.out_dim=current_input*N_filt



    def forward(self, x):
       batch=x.shape[0]
       seq_len=x.shape[1]

       if bool(self.cnn_use_laynorm_inp):
        x=self.ln0((x))

       if bool(self.cnn_use_batchnorm_inp):
        x=self.bn0((x))

       x=x.view(batch,1,seq_len)


       for i in range(self.N_cnn_lay):

         if self.cnn_use_laynorm[i]:
          if i==0:
           x = self.drop[i](self.act[i](self.ln[i](F.max_pool1d(torch.abs(self.conv[i](x)), self.cnn_max_pool_len[i]))))
          else:
           x = self.drop[i](self.act[i](self.ln[i](F.max_pool1d(self.conv[i](x), self.cnn_max_pool_len[i]))))

         if self.cnn_use_batchnorm[i]:
          x = self.drop[i](self.act[i](self.bn[i](F.max_pool1d(self.conv[i](x), self.cnn_max_pool_len[i]))))

         if self.cnn_use_batchnorm[i]==False and self.cnn_use_laynorm[i]==False:
          x = self.drop[i](self.act[i](F.max_pool1d(self.conv[i](x), self.cnn_max_pool_len[i])))


       x = x.view(batch,-1)

       return x





# the test's configuration, in place of read_conf() and ReadList()
fs=8000
cw_len=25
cw_shift=10
cnn_N_filt=[8,6,6]
cnn_len_filt=[31,5,5]
cnn_max_pool_len=[3,3,3]
cnn_use_laynorm_inp=True
cnn_use_batchnorm_inp=False
cnn_use_laynorm=[True,True,True]
cnn_use_batchnorm=[False,False,False]
cnn_act=['leaky_relu','leaky_relu','leaky_relu']
cnn_drop=[0.0,0.0,0.0]
fc_lay=[32,32]
fc_drop=[0.0,0.0]
fc_use_laynorm_inp=True
fc_use_batchnorm_inp=False
fc_use_batchnorm=[True,True]
fc_use_laynorm=[False,False]
fc_act=['leaky_relu','leaky_relu']
class_lay=[5]
class_drop=[0.0]
class_use_laynorm_inp=False
class_use_batchnorm_inp=False
class_use_batchnorm=[False]
class_use_laynorm=[False]
class_act=['softmax']
lr=0.001
batch_size=8
N_epochs=2
N_batches=2
N_eval_epoch=1
seed=1234
pt_file='none'
data_folder=''
wav_lst_tr=sorted(name for name in waves if name.startswith('tr'))
snt_tr=len(wav_lst_tr)
wav_lst_te=sorted(name for name in waves if name.startswith('te'))
snt_te=len(wav_lst_te)
CNN = SincNet
def create_batches_rnd(batch_size,data_folder,wav_lst,N_snt,wlen,lab_dict,fact_amp):

 # Initialization of the minibatch (batch_size,[0=>x_t,1=>x_t+N,1=>random_samp])
 sig_batch=np.zeros([batch_size,wlen])
 lab_batch=np.zeros(batch_size)

 snt_id_arr=np.random.randint(N_snt, size=batch_size)

 rand_amp_arr = np.random.uniform(1.0-fact_amp,1+fact_amp,batch_size)

 for i in range(batch_size):

  # select a random sentence from the list
  #[fs,signal]=scipy.io.wavfile.read(data_folder+wav_lst[snt_id_arr[i]])
  #signal=signal.astype(float)/32768

  [signal, fs] = sf.read(data_folder+wav_lst[snt_id_arr[i]])

  # accesing to a random chunk
  snt_len=signal.shape[0]
  snt_beg=np.random.randint(snt_len-wlen-1) #randint(0, snt_len-2*wlen-1)
  snt_end=snt_beg+wlen

  channels = len(signal.shape)
  if channels == 2:
    print('WARNING: stereo to mono: '+data_folder+wav_lst[snt_id_arr[i]])
    signal = signal[:,0]

  sig_batch[i,:]=signal[snt_beg:snt_end]*rand_amp_arr[i]
  lab_batch[i]=lab_dict[wav_lst[snt_id_arr[i]]]

 inp=Variable(torch.from_numpy(sig_batch).float().contiguous())
 lab=Variable(torch.from_numpy(lab_batch).float().contiguous())

 return inp,lab

# loss function
cost = nn.NLLLoss()


# Converting context and shift in samples
wlen=int(fs*cw_len/1000.00)
wshift=int(fs*cw_shift/1000.00)

# Batch_dev
Batch_dev=4


# Feature extractor CNN
CNN_arch = {'input_dim': wlen,
          'fs': fs,
          'cnn_N_filt': cnn_N_filt,
          'cnn_len_filt': cnn_len_filt,
          'cnn_max_pool_len':cnn_max_pool_len,
          'cnn_use_laynorm_inp': cnn_use_laynorm_inp,
          'cnn_use_batchnorm_inp': cnn_use_batchnorm_inp,
          'cnn_use_laynorm':cnn_use_laynorm,
          'cnn_use_batchnorm':cnn_use_batchnorm,
          'cnn_act': cnn_act,
          'cnn_drop':cnn_drop,
          }

CNN_net=CNN(CNN_arch)

# Loading label dictionary



DNN1_arch = {'input_dim': CNN_net.out_dim,
          'fc_lay': fc_lay,
          'fc_drop': fc_drop,
          'fc_use_batchnorm': fc_use_batchnorm,
          'fc_use_laynorm': fc_use_laynorm,
          'fc_use_laynorm_inp': fc_use_laynorm_inp,
          'fc_use_batchnorm_inp':fc_use_batchnorm_inp,
          'fc_act': fc_act,
          }

DNN1_net=MLP(DNN1_arch)


DNN2_arch = {'input_dim':fc_lay[-1] ,
          'fc_lay': class_lay,
          'fc_drop': class_drop,
          'fc_use_batchnorm': class_use_batchnorm,
          'fc_use_laynorm': class_use_laynorm,
          'fc_use_laynorm_inp': class_use_laynorm_inp,
          'fc_use_batchnorm_inp':class_use_batchnorm_inp,
          'fc_act': class_act,
          }


DNN2_net=MLP(DNN2_arch)
initialize(CNN_net)
initialize(DNN1_net)
initialize(DNN2_net)


if pt_file!='none':
   checkpoint_load = torch.load(pt_file)
   CNN_net.load_state_dict(checkpoint_load['CNN_model_par'])
   DNN1_net.load_state_dict(checkpoint_load['DNN1_model_par'])
   DNN2_net.load_state_dict(checkpoint_load['DNN2_model_par'])



optimizer_CNN = optim.RMSprop(CNN_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)
optimizer_DNN1 = optim.RMSprop(DNN1_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)
optimizer_DNN2 = optim.RMSprop(DNN2_net.parameters(), lr=lr,alpha=0.95, eps=1e-8)



for epoch in range(N_epochs):

  test_flag=0
  CNN_net.train()
  DNN1_net.train()
  DNN2_net.train()

  loss_sum=0
  err_sum=0

  for i in range(N_batches):

    [inp,lab]=create_batches_rnd(batch_size,data_folder,wav_lst_tr,snt_tr,wlen,lab_dict,0.2)
    pout=DNN2_net(DNN1_net(CNN_net(inp)))

    pred=torch.max(pout,dim=1)[1]
    loss = cost(pout, lab.long())
    err = torch.mean((pred!=lab.long()).float())



    optimizer_CNN.zero_grad()
    optimizer_DNN1.zero_grad()
    optimizer_DNN2.zero_grad()

    loss.backward()
    optimizer_CNN.step()
    optimizer_DNN1.step()
    optimizer_DNN2.step()

    loss_sum=loss_sum+loss.detach()
    err_sum=err_sum+err.detach()


  loss_tot=loss_sum/N_batches
  err_tot=err_sum/N_batches




# Full Validation  new
  if epoch%N_eval_epoch==0:

   CNN_net.eval()
   DNN1_net.eval()
   DNN2_net.eval()
   test_flag=1
   loss_sum=0
   err_sum=0
   err_sum_snt=0

   with torch.no_grad():
    for i in range(snt_te):

     #[fs,signal]=scipy.io.wavfile.read(data_folder+wav_lst_te[i])
     #signal=signal.astype(float)/32768

     [signal, fs] = sf.read(data_folder+wav_lst_te[i])

     signal=torch.from_numpy(signal).float().contiguous()
     lab_batch=lab_dict[wav_lst_te[i]]

     # split signals into chunks
     beg_samp=0
     end_samp=wlen

     N_fr=int((signal.shape[0]-wlen)/(wshift))


     sig_arr=torch.zeros([Batch_dev,wlen]).float().contiguous()
     lab= Variable((torch.zeros(N_fr+1)+lab_batch).contiguous().long())
     pout=Variable(torch.zeros(N_fr+1,class_lay[-1]).float().contiguous())
     count_fr=0
     count_fr_tot=0
     while end_samp<signal.shape[0]:
         sig_arr[count_fr,:]=signal[beg_samp:end_samp]
         beg_samp=beg_samp+wshift
         end_samp=beg_samp+wlen
         count_fr=count_fr+1
         count_fr_tot=count_fr_tot+1
         if count_fr==Batch_dev:
             inp=Variable(sig_arr)
             pout[count_fr_tot-Batch_dev:count_fr_tot,:]=DNN2_net(DNN1_net(CNN_net(inp)))
             count_fr=0
             sig_arr=torch.zeros([Batch_dev,wlen]).float().contiguous()

     if count_fr>0:
      inp=Variable(sig_arr[0:count_fr])
      pout[count_fr_tot-count_fr:count_fr_tot,:]=DNN2_net(DNN1_net(CNN_net(inp)))


     pred=torch.max(pout,dim=1)[1]
     loss = cost(pout, lab.long())
     err = torch.mean((pred!=lab.long()).float())

     [val,best_class]=torch.max(torch.sum(pout,dim=0),0)
     err_sum_snt=err_sum_snt+(best_class!=lab[0]).float()


     loss_sum=loss_sum+loss.detach()
     err_sum=err_sum+err.detach()

    err_tot_dev_snt=err_sum_snt/snt_te
    loss_tot_dev=loss_sum/snt_te
    err_tot_dev=err_sum/snt_te


   print("epoch %i, loss_tr=%f err_tr=%f loss_te=%f err_te=%f err_te_snt=%f" % (epoch, loss_tot,err_tot,loss_tot_dev,err_tot_dev,err_tot_dev_snt))

   with open(output_folder+"/res.res", "a") as res_file:
    res_file.write("epoch %i, loss_tr=%f err_tr=%f loss_te=%f err_te=%f err_te_snt=%f\n" % (epoch, loss_tot,err_tot,loss_tot_dev,err_tot_dev,err_tot_dev_snt))

   checkpoint={'CNN_model_par': CNN_net.state_dict(),
               'DNN1_model_par': DNN1_net.state_dict(),
               'DNN2_model_par': DNN2_net.state_dict(),
               }
   torch.save(checkpoint,output_folder+'/model_raw.pkl')

  else:
   print("epoch %i, loss_tr=%f err_tr=%f" % (epoch, loss_tot,err_tot))


# the test's additions: the trained weights, flip, and the first sinc_conv differentiated
record.append(params_of(CNN_net, DNN1_net, DNN2_net))
record.append(flip(torch.arange(6.).view(2, 3), 1).numpy())
old_conv = sinc_conv(4, 31, fs)
old_out = old_conv(inp[:, None, :])
old_out.pow(2).mean().backward()
record.append(old_out.detach().numpy())
record.append(old_conv.filt_b1.grad.numpy())
record.append(old_conv.filt_band.grad.numpy())
'''

SINCNET_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("from torch.autograd import Variable", "from retrograd.autograd import Variable"),
    (
        "    optimizer_CNN.zero_grad()\n    optimizer_DNN1.zero_grad()\n    optimizer_DNN2.zero_grad()\n",
        "",
    ),
    (
        "    loss.backward()\n    optimizer_CNN.step()\n    optimizer_DNN1.step()\n    optimizer_DNN2.step()",
        "    grads = loss.backward()\n    optimizer_CNN.step(grads)\n    optimizer_DNN1.step(grads)\n    optimizer_DNN2.step(grads)",
    ),
    ("old_out.pow(2).mean().backward()", "grads = old_out.pow(2).mean().backward()"),
    (".filt_b1.grad.numpy()", ".filt_b1.grad(grads).numpy()"),
    (".filt_band.grad.numpy()", ".filt_band.grad(grads).numpy()"),
]


def test_sincnet_speaker_id_trains_validates_and_saves_as_torch(capsys, tmp_path):
    """Two epochs of SincNet's speaker-id training with validation after each: the printed
    losses and error rates, the weights after training, ``flip``, and the first
    ``sinc_conv``'s output and the gradients of its ``float64`` cut-offs."""
    rng = np.random.default_rng(33101)
    waves = {f"tr{k}.wav": rng.standard_normal(400 + 40 * k) * 0.3 for k in range(4)}
    waves.update({f"te{k}.wav": rng.standard_normal(520 + 100 * k) * 0.3 for k in range(2)})
    lab_dict = {name: k % 5 for k, name in enumerate(sorted(waves))}
    soundfile = SimpleNamespace(read=lambda path: (waves[path], 8000))
    (theirs, ours), logs = runs_with_draws(
        SINCNET_SOURCE, SINCNET_STEPS, capsys, 33102, initialize=initializer(),
        params_of=params_of, waves=waves, lab_dict=lab_dict, sf=soundfile,
        output_folder=str(tmp_path),
    )  # fmt: skip
    printed = [
        [float(v) for v in re.findall(r"=(-?[\d.]+)", line)] for line in logs[0].splitlines()
    ]
    assert len(printed) == 2 and len(printed[0]) == 5
    np.testing.assert_allclose(
        [[float(v) for v in re.findall(r"=(-?[\d.]+)", line)] for line in logs[1].splitlines()],
        printed, rtol=1e-4, atol=2e-6,
    )  # fmt: skip
    assert (tmp_path / "model_raw.pkl").exists()
    # Parameters whose true gradient is zero, so RMSprop steps them by rounding noise: the
    # biases of the second and third convolutions (each channel's LayerNorm over time takes
    # the shift away), the biases before each BatchNorm of the MLP (set as zero parameters
    # though the layer is built without one) and the input LayerNorm's shift before the first
    # of them. In eval mode the running statistics no longer cancel the last, which is why the
    # validation figures agree to 1e-4.
    noisy = ("0.conv.1.bias", "0.conv.2.bias", "1.wx.0.bias", "1.wx.1.bias", "1.ln0.beta")
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=noisy)
